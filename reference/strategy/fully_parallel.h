// Fully parallel save and load (docs/megatron-semantics.md §4.2-§4.3): Megatron's
// FullyParallelSaveStrategyWrapper / FullyParallelLoadStrategyWrapper over a
// parallelization group (Megatron training: the DP group with CP).
//
// Save: only shard metadata moves. ApplySavingParallelization rewrites the
// replica ids of a rank's ShardedTensors so that each shard whose main
// replica lives in the group is written by exactly one group rank, chosen by
// the distribution greedy (strategy/distribution.h).
//
// Load: each rank reads from storage only the shards assigned to it (every
// shard the group holds is read once within the group), then the group
// exchanges them (strategy/exchange.h); objects are read by the ranks that
// hold their main replica and all-gathered over the whole communicator.
//
// A DistributionCache (Megatron's do_cache_distribution) skips the metadata
// all-gather while every group rank's shard metadata is unchanged; unlike
// Megatron's cache it checks that with one all-reduce, so a changed layout
// is never distributed with a stale plan.
//
// Thread-safety: collective; one call per rank. A cache belongs to one rank.
#ifndef DISTCKPT_STRATEGY_FULLY_PARALLEL_H_
#define DISTCKPT_STRATEGY_FULLY_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "comm/communicator.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"
#include "strategy/exchange.h"

namespace distckpt {

struct DistributionCache {
  std::optional<ShardDistribution> distribution;  // nullopt: group of one rank
  uint64_t fingerprint = 0;                       // this rank's shard metadata
  bool filled = false;
  uint64_t hits = 0;  // calls that reused the distribution
};

// The distribution for `sharded` over `group`, from `cache` when every group
// rank's metadata matches it (one all-reduce), else computed (one
// all-gather) and stored in `cache`. Collective over `group`; a group of one
// rank issues no collective and yields nullopt.
std::optional<ShardDistribution> CachedDistribution(const Node& sharded, Communicator& group,
                                                    bool ignore_groups, DistributionCache* cache);

// apply_saving_parallelization: rewrites replica ids of `sharded` (a
// preprocessed sharded tree) to 0 / 1. Returns false (and changes nothing)
// for a group of one rank. Collective over `group`.
bool ApplySavingParallelization(Node& sharded, Communicator& group, DistributionCache* cache);

// Rank-local reading of a sharded tree: returns it with every ShardedTensor
// replaced by its loaded Tensor and every ShardedObject by its value (the
// engine passes its storage reader).
using ReadShardsFn = std::function<Node(const Node& sharded)>;

struct FullyParallelLoadOptions {
  ExchangeAlgorithm exchange = ExchangeAlgorithm::kBroadcast;
  DistributionCache* cache = nullptr;
};

// FullyParallelLoadStrategyWrapper.load: returns `sharded` loaded, like
// `read` would, reading each shard once within `group` (a sub-communicator
// of `comm` containing this rank; `comm` itself for Megatron's WORLD).
// Failures are agreed over `comm`: every rank throws. A shard or object that
// nobody read is CheckpointError(kIncomplete) "Missing shards after fully
// parallel loading: ..." / "Missing object shards after fully parallel
// loading: ...". Collective over `comm`.
Node FullyParallelLoad(const Node& sharded, const ReadShardsFn& read, Communicator& comm,
                       Communicator& group, const FullyParallelLoadOptions& options,
                       ExchangeStats* stats = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_FULLY_PARALLEL_H_
