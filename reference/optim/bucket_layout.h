// Megatron's distributed-optimizer gradient-buffer layout
// (param_and_grad_buffer.py): a rank's parameters are laid out one after the
// other, each start padded to a multiple of 64 elements; a bucket closes once
// it holds at least `bucket_numel` elements (0 = one bucket) and its end is
// padded to a multiple of lcm(dp, pad_divisor) so it splits evenly over the
// DP group. `numel_unpadded` = end of the bucket's last parameter (intra-
// bucket start padding included), which does not depend on the DP size.
//
// Thread-safety: pure functions and value types.
#ifndef DISTCKPT_OPTIM_BUCKET_LAYOUT_H_
#define DISTCKPT_OPTIM_BUCKET_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "core/box.h"

namespace distckpt {

inline constexpr int64_t kParamStartAlignment = 64;

struct Bucket {
  int64_t start = 0;  // in the buffer
  int64_t numel = 0;  // padded
  int64_t numel_unpadded = 0;
  std::vector<int> params;  // indices into the input list
};

struct BufferLayout {
  std::vector<FlatRange> params;  // each parameter's range in the buffer
  std::vector<Bucket> buckets;
};

// Throws CheckpointError(kInvalidArgument) for dp < 1 or pad_divisor < 1.
BufferLayout LayoutBuffer(const std::vector<int64_t>& param_numels, int64_t dp, int64_t pad_divisor,
                          int64_t bucket_numel);

// DP rank `dp_rank`'s slice of `bucket`, in buffer coordinates.
FlatRange DpSlice(const Bucket& bucket, int64_t dp, int64_t dp_rank);

// The bucket-relative ranges of [0, numel_unpadded) ∩ the rank's slice, cut at
// every parameter start and end (one range per parameter piece and per
// start-padding gap), in order; empty when the slice is all padding.
std::vector<FlatRange> BucketSegments(const BufferLayout& layout, const Bucket& bucket, int64_t dp,
                                      int64_t dp_rank);

}  // namespace distckpt

#endif  // DISTCKPT_OPTIM_BUCKET_LAYOUT_H_
