// Plan and metadata reuse across saves of an unchanged structure
// (docs/megatron-semantics.md §4.6, Megatron's ckpt_assume_constant_structure and
// cached_metadata).
//
// A SavePlanCache keeps what a successful save planned: the fingerprint of
// this rank's shard metadata and save options, the fully parallel
// distribution, the layout of what this rank wrote and, on the coordinator,
// what every rank wrote. The next save reuses it only when one all-reduce
// says every rank's fingerprint is unchanged (Megatron's in-job cache never
// re-checks; its loaded-metadata reuse does, with an all-reduce MIN like
// this). Reusing skips the global validation gather, the common-state
// broadcast and the distribution all-gather; the commit gather shrinks to
// the checksums of ranks whose written layout is unchanged.
//
// Thread-safety: a cache belongs to one rank; value helpers are pure.
#ifndef DISTCKPT_STRATEGY_PLAN_CACHE_H_
#define DISTCKPT_STRATEGY_PLAN_CACHE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "format/checkpoint_metadata.h"
#include "strategy/distribution.h"

namespace distckpt {

struct SavePlanCache {
  bool filled = false;
  uint64_t fingerprint = 0;
  std::optional<ShardDistribution> distribution;  // fully parallel saves
  CheckpointMetadata written;                     // this rank's last written metadata
  std::vector<CheckpointMetadata> ranks_written;  // coordinator: every rank's
  uint64_t reuses = 0;                            // saves that reused the plan
};

// The checksums of `local` in layout order (tensors by key, their chunks in
// order, then objects by unique key) when its layout equals `cached`'s
// (everything but the checksums); nullopt otherwise.
std::optional<std::vector<uint64_t>> ChecksumsIfSameLayout(const CheckpointMetadata& local,
                                                           const CheckpointMetadata& cached);
// `cached` with the checksums of ChecksumsIfSameLayout put back;
// CheckpointError(kCorruption) when their number does not fit.
CheckpointMetadata WithChecksums(CheckpointMetadata cached, const std::vector<uint64_t>& checksums);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_PLAN_CACHE_H_
