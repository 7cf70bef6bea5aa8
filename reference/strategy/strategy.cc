#include "strategy/strategy.h"

#include "strategy/fully_parallel.h"
#include "strategy/two_stage.h"

namespace distckpt {

std::optional<ShardDistribution> AssignWriters(const SaveStrategy& strategy, Node& sharded,
                                               Communicator& comm,
                                               const ShardDistribution* reused) {
  switch (strategy.kind) {
    case SaveStrategy::Kind::kPlain:
      return std::nullopt;
    case SaveStrategy::Kind::kFullyParallel:
      return ApplySavingParallelization(sharded, strategy.group ? *strategy.group : comm, reused);
  }
  return std::nullopt;
}

Node LoadSharded(const LoadStrategy& strategy, const Node& sharded, const ReadShardsFn& read,
                 Communicator& comm, ExchangeStats* stats) {
  Communicator& group = strategy.group ? *strategy.group : comm;
  switch (strategy.kind) {
    case LoadStrategy::Kind::kFullyParallel:
      return FullyParallelLoad(sharded, read, comm, group, strategy.exchange, strategy.cache,
                               stats);
    case LoadStrategy::Kind::kTwoStage:
      return TwoStageLoad(sharded, read, comm, group, stats);
    case LoadStrategy::Kind::kPlain:
      break;
  }
  Node loaded;
  AgreeOnOutcome(comm, [&] { loaded = read(sharded); });
  return loaded;
}

}  // namespace distckpt
