// Save and load strategies: how a save or a load spreads its work over the
// ranks (docs/strategies.md, docs/megatron-semantics.md §4). One description,
// shared by the engine (SaveOptions::strategy, LoadOptions::strategy), the
// scenario harness and the CLI, which parses its flags straight into it.
//
// A strategy is a value: a kind, the parallelization group it works in and
// its plan cache. Megatron builds the same thing by wrapping a base
// strategy; each kind here is one of its compositions:
//
//   SaveStrategy                    Megatron
//     kPlain                        the base save strategy (torch_dist)
//     kFullyParallel(group, cache)  FullyParallelSaveStrategyWrapper(base, group,
//                                   do_cache_distribution)
//   LoadStrategy
//     kPlain                        the base load strategy
//     kFullyParallel(group,         FullyParallelLoadStrategyWrapper(base, group,
//       exchange, cache)            do_cache_distribution, exchange_algo)
//     kTwoStage(group)              TwoStageDataParallelLoadShardedStrategy(group)
//
// The group defaults to the operation's communicator (Megatron's WORLD);
// Megatron training passes the DP group with CP. A group is a per-rank
// communicator, so a description parsed once (CLI flags) gets its group on
// each rank. The engine calls the strategy through one entry point each:
// AssignWriters (save) and LoadSharded (load). Asynchronous saving is the
// engine's SaveAsync; `writers` and `staging` are its parameters.
//
// Thread-safety: value types; the entry points are collective (one call per
// rank). A cache belongs to one rank.
#ifndef DISTCKPT_STRATEGY_STRATEGY_H_
#define DISTCKPT_STRATEGY_STRATEGY_H_

#include <functional>
#include <optional>

#include "comm/communicator.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"
#include "strategy/exchange.h"
#include "strategy/plan_cache.h"

namespace distckpt {

class StagingPool;

struct SaveStrategy {
  enum class Kind {
    kPlain,  // each rank writes the main replicas it holds
    // Each shard whose main replica lives in the group is written by one
    // group rank, chosen by Megatron's greedy that balances bytes
    // (strategy/fully_parallel.h); only replica ids change.
    kFullyParallel,
  };
  Kind kind = Kind::kPlain;
  Communicator* group = nullptr;  // nullptr = the save's communicator
  // Plan reuse (strategy/plan_cache.h) for any kind: while one all-reduce
  // finds every rank's structure unchanged, a save skips the validation,
  // common-state and distribution collectives and gathers only checksums.
  PlanCache* cache = nullptr;
  // SaveAsync (engine/save_async.h): background writer threads per rank,
  // one data file each; staging buffers from `staging` (nullptr = fresh).
  int writers = 1;
  StagingPool* staging = nullptr;

  static SaveStrategy FullyParallel(Communicator* group = nullptr, PlanCache* cache = nullptr) {
    SaveStrategy strategy;
    strategy.kind = Kind::kFullyParallel;
    strategy.group = group;
    strategy.cache = cache;
    return strategy;
  }
};

struct LoadStrategy {
  enum class Kind {
    kPlain,  // each rank reads what it requests
    // Each shard the group requests is read from storage once, by a rank
    // chosen by the greedy, then exchanged with `exchange`
    // (strategy/fully_parallel.h, strategy/exchange.h).
    kFullyParallel,
    // The lowest group rank requesting a shard reads it and broadcasts it,
    // one shard at a time (strategy/two_stage.h).
    kTwoStage,
  };
  Kind kind = Kind::kPlain;
  Communicator* group = nullptr;                               // nullptr = the load's communicator
  ExchangeAlgorithm exchange = ExchangeAlgorithm::kBroadcast;  // kFullyParallel
  PlanCache* cache = nullptr;  // kFullyParallel: the distribution, reused (plan_cache.h)

  static LoadStrategy FullyParallel(Communicator* group = nullptr,
                                    ExchangeAlgorithm exchange = ExchangeAlgorithm::kBroadcast,
                                    PlanCache* cache = nullptr) {
    LoadStrategy strategy;
    strategy.kind = Kind::kFullyParallel;
    strategy.group = group;
    strategy.exchange = exchange;
    strategy.cache = cache;
    return strategy;
  }
  static LoadStrategy TwoStage(Communicator* group = nullptr) {
    LoadStrategy strategy;
    strategy.kind = Kind::kTwoStage;
    strategy.group = group;
    return strategy;
  }
};

// The save strategy's choice of who writes what: rewrites the replica ids of
// `sharded` (a preprocessed sharded tree) and returns the distribution
// applied, `*reused` (a plan every rank reuses: no collective) or one
// computed over the group. nullopt, with `sharded` unchanged, for kPlain or
// a group of one rank. Collective over the group (kFullyParallel, unless
// reused).
std::optional<ShardDistribution> AssignWriters(const SaveStrategy& strategy, Node& sharded,
                                               Communicator& comm,
                                               const ShardDistribution* reused = nullptr);

// Rank-local reading of a sharded tree: returns it with every ShardedTensor
// replaced by its loaded Tensor and every ShardedObject by its value (the
// engine passes its storage reader).
using ReadShardsFn = std::function<Node(const Node& sharded)>;

// The load strategy's load: `sharded` with every ShardedTensor and
// ShardedObject loaded, like `read` would, with reading spread as the kind
// says. Failures are agreed over `comm`: every rank throws. `stats`, when
// given, counts this rank's exchange. Collective over `comm`.
Node LoadSharded(const LoadStrategy& strategy, const Node& sharded, const ReadShardsFn& read,
                 Communicator& comm, ExchangeStats* stats = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_STRATEGY_H_
