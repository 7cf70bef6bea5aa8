// export --to native|dcp|dcp-1.13: a checkpoint rewritten in another format.
//
// `src` (any format, any layout) rewritten in `format` to `out`: every
// tensor as one whole chunk, read and written one global tensor at a time
// (memory: the largest tensor); objects, common state and the recorded
// topology kept, so `diff src out` is identical. Objects whose reader gives a
// record in `format`'s ObjectRecordEncoding (DCP, zarr -> dcp) are written as
// stored, and so is the common state (CommonRecord) for a format that keeps it
// as an object; the rest from their JSON values.
//
// Thread-safety: one call at a time per `out`.
#ifndef DISTCKPT_INTEROP_CONVERT_H_
#define DISTCKPT_INTEROP_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "format/format.h"

namespace distckpt {

struct ConvertSummary {
  size_t tensors = 0, objects = 0;
  uint64_t bytes_written = 0, largest_tensor_bytes = 0;
};
ConvertSummary ConvertCheckpoint(const std::string& src, const std::string& out,
                                 const Format& format);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_CONVERT_H_
