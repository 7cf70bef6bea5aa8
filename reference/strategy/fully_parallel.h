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
// With a PlanCache (Megatron's do_cache_distribution), a load reuses the
// distribution while every group rank's shard metadata is unchanged; unlike
// Megatron's cache it checks that with one all-reduce (strategy/plan_cache.h).
// A save's plan, distribution included, is reused by the engine.
//
// Thread-safety: collective; one call per rank. A cache belongs to one rank.
#ifndef DISTCKPT_STRATEGY_FULLY_PARALLEL_H_
#define DISTCKPT_STRATEGY_FULLY_PARALLEL_H_

#include <optional>

#include "comm/communicator.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"
#include "strategy/exchange.h"
#include "strategy/plan_cache.h"
#include "strategy/strategy.h"

namespace distckpt {

// apply_saving_parallelization: rewrites the replica ids of `sharded` (a
// preprocessed sharded tree) to 0 / 1 so that each shard whose main replica
// lives in `group` is written by one group rank, with `*reused` (a cached
// plan's, no collective) or the distribution computed over `group` (one
// all-gather). Returns the distribution applied; nullopt (and changes
// nothing) for a group of one rank. Collective over `group` unless reused.
std::optional<ShardDistribution> ApplySavingParallelization(
    Node& sharded, Communicator& group, const ShardDistribution* reused = nullptr);

// FullyParallelLoadStrategyWrapper.load: returns `sharded` loaded, like
// `read` would, reading each shard once within `group` (a sub-communicator
// of `comm` containing this rank; `comm` itself for Megatron's WORLD).
// Failures are agreed over `comm`: every rank throws. A shard or object that
// nobody read is CheckpointError(kIncomplete) "Missing shards after fully
// parallel loading: ..." / "Missing object shards after fully parallel
// loading: ...". `exchange` moves the shards read to the ranks that wait for
// them; `cache`, when given, keeps the distribution (reused only after one
// all-reduce over `group` finds it current). Collective over `comm`.
Node FullyParallelLoad(const Node& sharded, const ReadShardsFn& read, Communicator& comm,
                       Communicator& group,
                       ExchangeAlgorithm exchange = ExchangeAlgorithm::kBroadcast,
                       PlanCache* cache = nullptr, ExchangeStats* stats = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_FULLY_PARALLEL_H_
