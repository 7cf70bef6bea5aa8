// Megatron v0.15.3's N-D flattened tensor reformulation
// (strategies/resharding.py, docs/megatron-semantics.md §5.3) as a pure function:
// which whole checkpoint chunks an application chunk must read when the
// checkpoint's axis fragmentations differ from the application's.
//
// The native engine stores flattened ranges in global coordinates and
// needs no reformulation; this reproduces Megatron's expected offsets
// (test_reformulate_nd_flattened_tensors) for compatibility checks.
//
// Thread-safety: pure function.
#ifndef DISTCKPT_OPTIM_REFORMULATION_H_
#define DISTCKPT_OPTIM_REFORMULATION_H_

#include <vector>

#include "core/box.h"

namespace distckpt {

// Global offsets of the checkpoint chunks (each of shape
// ckpt_global_shape / ckpt_fragmentations) overlapping the application chunk
// at `app_chunk_offset` (chunk indices) of a grid with `app_fragmentations`.
// Per axis the chunk indices are range(int(k/a*c), ceil(k/a*(c+1))) in
// floating point, as Megatron computes them; combinations in row-major order.
// Throws CheckpointError(kInvalidArgument) when the ranks differ or the
// checkpoint shape does not divide by its fragmentations.
std::vector<Shape> ReformulatedChunkOffsets(const Shape& ckpt_global_shape,
                                            const Shape& ckpt_fragmentations,
                                            const Shape& app_fragmentations,
                                            const Shape& app_chunk_offset);

}  // namespace distckpt

#endif  // DISTCKPT_OPTIM_REFORMULATION_H_
