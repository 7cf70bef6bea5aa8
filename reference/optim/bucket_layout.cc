#include "optim/bucket_layout.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"

namespace distckpt {
namespace {

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

BufferLayout LayoutBuffer(const std::vector<int64_t>& param_numels, int64_t dp, int64_t pad_divisor,
                          int64_t bucket_numel) {
  if (dp < 1 || pad_divisor < 1) {
    Fail(ErrorKind::kInvalidArgument,
         "buffer layout needs dp >= 1 and pad_divisor >= 1, got {} and {}", dp, pad_divisor);
  }
  const int64_t end_multiple = std::lcm(dp, pad_divisor);
  BufferLayout layout;
  Bucket bucket;
  int64_t cursor = 0;
  auto close = [&] {
    bucket.numel_unpadded = cursor - bucket.start;
    bucket.numel = RoundUp(bucket.numel_unpadded, end_multiple);
    cursor = bucket.start + bucket.numel;
    layout.buckets.push_back(bucket);
    bucket = Bucket{};
    bucket.start = cursor;
  };
  for (size_t i = 0; i < param_numels.size(); ++i) {
    int64_t start = bucket.start + RoundUp(cursor - bucket.start, kParamStartAlignment);
    cursor = start + param_numels[i];
    layout.params.push_back({start, cursor});
    bucket.params.push_back(static_cast<int>(i));
    if (bucket_numel > 0 && cursor - bucket.start >= bucket_numel) close();
  }
  if (!bucket.params.empty()) close();
  return layout;
}

FlatRange DpSlice(const Bucket& bucket, int64_t dp, int64_t dp_rank) {
  int64_t size = bucket.numel / dp;
  return {bucket.start + dp_rank * size, bucket.start + (dp_rank + 1) * size};
}

std::vector<FlatRange> BucketSegments(const BufferLayout& layout, const Bucket& bucket, int64_t dp,
                                      int64_t dp_rank) {
  std::set<int64_t> cuts{0, bucket.numel_unpadded};
  for (int i : bucket.params) {
    cuts.insert(layout.params[i].start - bucket.start);
    cuts.insert(layout.params[i].stop - bucket.start);
  }
  FlatRange slice = DpSlice(bucket, dp, dp_rank);
  slice = {slice.start - bucket.start, std::min(slice.stop - bucket.start, bucket.numel_unpadded)};
  cuts.insert(std::clamp(slice.start, int64_t{0}, bucket.numel_unpadded));
  cuts.insert(std::clamp(slice.stop, int64_t{0}, bucket.numel_unpadded));
  std::vector<FlatRange> segments;
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
    FlatRange seg{*it, *std::next(it)};
    if (seg.start >= slice.start && seg.stop <= slice.stop && seg.size() > 0)
      segments.push_back(seg);
  }
  return segments;
}

}  // namespace distckpt
