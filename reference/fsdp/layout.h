// FSDP shard layouts (docs/fsdp-verl-perf.md §1.1, §1.6): which rows of each
// parameter a data-parallel rank holds.
//
// Megatron-FSDP v1 (param_and_grad_buffer.py): the parameters of one bucket
// are placed in a virtual flat buffer with chunk_size_factor = LCM of all
// their row sizes (the v1 quirk); a parameter whose numel is a multiple of
// the chunk goes at the cursor; otherwise it goes at the cursor, the first
// unplaced larger-than-a-chunk "conjugate" whose remainder fits the gap to
// the next chunk boundary ends exactly on that boundary, and the rest of the
// gap takes smaller-than-a-chunk "fragments" in order (unsorted, as v1). The
// bucket is padded to a multiple of dp * chunk and split evenly; because
// shard boundaries are chunk boundaries, every rank holds whole rows.
//
// FSDP2 (fully_shard): torch.chunk on dim 0, trailing chunks short or empty.
//
// Thread-safety: pure functions and value types.
#ifndef DISTCKPT_FSDP_LAYOUT_H_
#define DISTCKPT_FSDP_LAYOUT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/box.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

struct MegatronFsdpBucket {
  int64_t dp = 1;
  int64_t chunk_size_factor = 1;
  int64_t size = 0;               // padded, a multiple of dp * chunk_size_factor
  std::vector<FlatRange> params;  // each parameter's range in the bucket
  int64_t shard_size() const;     // size / dp
};

// Throws CheckpointError(kInvalidArgument) for dp < 1 or a 0-d shape.
MegatronFsdpBucket LayoutMegatronFsdpBucket(const std::vector<Shape>& shapes, int64_t dp);

// The rows [start, stop) of parameter `param` that DP rank `rank` holds
// (start == stop when none).
FlatRange MegatronFsdpRows(const MegatronFsdpBucket& bucket, const std::vector<Shape>& shapes,
                           int param, int64_t rank);

// torch.chunk(rows, dp)[rank] as a row range: ceil-sized chunks, trailing
// ones short or empty.
FlatRange Fsdp2Rows(int64_t rows, int64_t dp, int64_t rank);

enum class FsdpLayout { kNone, kMegatron, kFsdp2 };
// "none" | "megatron" | "fsdp2"; throws CheckpointError(kInvalidArgument).
FsdpLayout ParseFsdpLayout(std::string_view name);

// Re-shards a rank's parameter shards (regular boxes, no flattened range;
// their local shapes are what FSDP splits) over its DP group: each becomes
// the rows this DP rank holds, an uneven ShardedTensor (no
// axis_fragmentations) with DP dropped from its (PP, TP, DP) replica id.
// Ranks without rows keep an empty shard. Megatron-FSDP puts all shards of
// one dtype in one bucket, in order. kNone returns `shards` unchanged.
std::vector<ShardedTensor> ShardForFsdp(FsdpLayout layout, const std::vector<ShardedTensor>& shards,
                                        int64_t dp, int64_t dp_rank);

}  // namespace distckpt

#endif  // DISTCKPT_FSDP_LAYOUT_H_
