// Executes a TensorPlan: reads the planned byte runs of stored chunks into a
// destination buffer, converting dtype when the destination's differs.
//
// Same dtype: bytes go straight from pread into the destination. Otherwise
// each stored chunk's runs are read into one staging buffer (at most one
// chunk's overlap at a time) and converted.
//
// Thread-safety: concurrent calls are safe for distinct destinations.
#ifndef DISTCKPT_ENGINE_TENSOR_READER_H_
#define DISTCKPT_ENGINE_TENSOR_READER_H_

#include "core/tensor.h"
#include "engine/load_plan.h"
#include "format/format.h"

namespace distckpt {

// Returns the number of stored bytes the plan needs (what was requested from the reader).
uint64_t ExecuteTensorPlan(CheckpointReader& reader, const StoredTensor& stored,
                           const TensorPlan& plan, Tensor& dst, VerifyPolicy policy);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_TENSOR_READER_H_
