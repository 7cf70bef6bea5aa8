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

struct PlanBytes {
  uint64_t needed = 0;       // stored bytes the plan reads
  uint64_t chunk_bytes = 0;  // total size of the stored chunks it touches
};

PlanBytes ExecuteTensorPlan(CheckpointReader& reader, const StoredTensor& stored,
                            const TensorPlan& plan, Tensor& dst, VerifyPolicy policy);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_TENSOR_READER_H_
