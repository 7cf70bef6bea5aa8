// The plan cache: what a save or a load planned, reused while nothing it
// depends on changed (docs/megatron-semantics.md §4.2, §4.3, §4.6: Megatron's
// ckpt_assume_constant_structure, which turns on both the fully parallel
// wrappers' do_cache_distribution and the save strategy's cached plan and
// metadata).
//
// A cache holds the fingerprint of what its plan was made for (this rank's
// shard metadata, the options and the rank's place in its group; see
// PlanFingerprint), the fully parallel distribution and, for saves, the
// layout of what this rank wrote and, on the coordinator, what every rank
// wrote. An operation reuses it only when one all-reduce says every rank's
// fingerprint is unchanged (PlanReusable): Megatron's in-job caches never
// re-check; its loaded-metadata reuse does, with an all-reduce MIN like
// this. So a changed layout on any rank is planned afresh on every rank,
// never distributed with a stale plan.
//
//   saves (SaveStrategy::cache, engine/save.h)  a reused plan skips the
//       global validation gather, the common-state broadcast and the
//       distribution all-gather; the commit gather shrinks to the checksums
//       of ranks whose written layout is unchanged. Refilled by every
//       successful commit.
//   fully parallel loads (LoadStrategy::cache)  a reused plan skips the
//       metadata all-gather of the distribution.
//
// Use one cache per repeated operation on each rank (one for the saves of a
// training run, another for its loads): the fingerprint tells a save's plan
// from a load's, so a shared cache is correct but never hit.
//
// Thread-safety: a cache belongs to one rank; value helpers are pure.
#ifndef DISTCKPT_STRATEGY_PLAN_CACHE_H_
#define DISTCKPT_STRATEGY_PLAN_CACHE_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "format/checkpoint_metadata.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"

namespace distckpt {

struct PlanCache {
  bool filled = false;
  uint64_t fingerprint = 0;  // of what the plan was made for
  // Fully parallel: who writes or reads each shard; nullopt for a plain save
  // or a group of one rank.
  std::optional<ShardDistribution> distribution;
  CheckpointMetadata written;                     // saves: this rank's last written metadata
  std::vector<CheckpointMetadata> ranks_written;  // saves, coordinator: every rank's
  uint64_t hits = 0;                              // operations that reused the plan
};

// The fingerprint of a plan for `sharded`: this rank's shard metadata (every
// ShardedTensor and ShardedObject, without data) and `context`, whatever
// else shapes the plan (the operation, its options, the group). Pure.
uint64_t PlanFingerprint(const Node& sharded, std::string_view context);

// True when every rank of `comm` holds in its cache a plan for its own
// `fingerprint`: one all-reduce (MIN) over `comm`, so every rank gets the
// same answer. Collective over `comm`.
bool PlanReusable(const PlanCache& cache, uint64_t fingerprint, Communicator& comm);

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
