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
#include "topology/topology.h"

namespace distckpt {

struct MegatronFsdpBucket {
  int64_t dp = 1;
  int64_t chunk_size_factor = 1;
  int64_t size = 0;               // padded, a multiple of dp * chunk_size_factor
  std::vector<FlatRange> params;  // each parameter's range in the bucket
  int64_t shard_size() const;     // size / dp
};

// Throws CheckpointError(kInvalidArgument) for dp < 1, a 0-d shape, or
// sizes whose layout passes 2^63 (naming the bucket's shapes).
MegatronFsdpBucket LayoutMegatronFsdpBucket(const std::vector<Shape>& shapes, int64_t dp);

// The rows [start, stop) of parameter `param` that DP rank `rank` holds
// (start == stop when none); throws kInvalidArgument unless 0 <= rank < dp.
FlatRange MegatronFsdpRows(const MegatronFsdpBucket& bucket, const std::vector<Shape>& shapes,
                           int param, int64_t rank);

// torch.chunk(rows, dp)[rank] as a row range: ceil-sized chunks, trailing
// ones short or empty. Throws kInvalidArgument unless rows >= 0 and
// 0 <= rank < dp.
FlatRange Fsdp2Rows(int64_t rows, int64_t dp, int64_t rank);

enum class FsdpLayout { kNone, kMegatron, kFsdp2 };
// "none" | "megatron" | "fsdp2"; throws CheckpointError(kInvalidArgument).
FsdpLayout ParseFsdpLayout(std::string_view name);

// One parameter as FSDP sees it: the ShardedTensor pieces its local tensor
// is made of, concatenated along the first local axis (one piece, or the W
// and V halves of a GLU fc1 factory). FSDP splits the concatenated rows and
// each piece keeps its part (possibly none).
struct FsdpParam {
  std::vector<ShardedTensor> pieces;
  int64_t unit = -1;    // FSDP unit (e.g. the layer); -1: none
  bool expert = false;  // sharded over the expert group, in its own buckets
};

// The FSDP group a rank shards over: `size` ranks, this one at `rank`;
// `replica` is the HSDP replicate coordinate (0 without HSDP), which becomes
// the DP component of the shards' replica ids.
struct FsdpGroup {
  int64_t size = 1, rank = 0, replica = 0;
};

// The groups of rank `rank`: dense parameters shard over dp_shard x cp and
// replicate over dp_replicate (Topology::dp_shard); expert parameters shard
// over the expert DP group. Throws CheckpointError(kUnsupported) for HSDP
// with ep > 1 when `experts` (naming "topology dp_shard").
FsdpGroup DenseFsdpGroup(const Topology& topology, int rank);
FsdpGroup ExpertFsdpGroup(const Topology& topology, int rank);

// Re-shards a rank's parameters (regular pieces, no flattened range; their
// local shapes are what FSDP splits) over their FSDP group: each piece
// becomes the rows this rank holds, an uneven ShardedTensor (no
// axis_fragmentations) whose (PP, TP, DP) replica id gets the group's
// `replica` as DP. Ranks without rows keep empty pieces. Megatron-FSDP
// buckets parameters by (dtype, expert, unit), in order; FSDP2 chunks each
// parameter. Returns the new pieces per parameter; kNone returns them as is.
// Throws CheckpointError(kInvalidArgument) naming the key of a bad piece.
std::vector<std::vector<ShardedTensor>> ShardParamsForFsdp(FsdpLayout layout,
                                                           const std::vector<FsdpParam>& params,
                                                           const FsdpGroup& dense,
                                                           const FsdpGroup& expert);

// The same for single-piece dense parameters over one group (tensor specs).
std::vector<ShardedTensor> ShardForFsdp(FsdpLayout layout, const std::vector<ShardedTensor>& shards,
                                        const FsdpGroup& group);

}  // namespace distckpt

#endif  // DISTCKPT_FSDP_LAYOUT_H_
