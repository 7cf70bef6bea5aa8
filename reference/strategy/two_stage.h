// Two-stage load (docs/megatron-semantics.md §4.7, Megatron's deprecated
// TwoStageDataParallelLoadShardedStrategy): within a data-parallel group,
// each shard that several group ranks request is read from storage by the
// lowest of them and broadcast to the others, one shard at a time in
// ShardId order: read, broadcast, copy, free. Memory beyond the
// destinations stays at one shard. Shards one rank alone requests, and all
// ShardedObjects, are read by the requesting rank itself.
//
// Thread-safety: collective; one call per rank.
#ifndef DISTCKPT_STRATEGY_TWO_STAGE_H_
#define DISTCKPT_STRATEGY_TWO_STAGE_H_

#include <vector>

#include "comm/communicator.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"
#include "strategy/exchange.h"
#include "strategy/strategy.h"

namespace distckpt {

// Every shard of the group (index = group rank) assigned to its lowest
// holder, in ShardId order. nullopt for a group of one rank.
std::optional<ShardDistribution> LowestHolderDistribution(
    const std::vector<std::vector<ShardedTensor>>& shards_by_group_rank);

// Returns `sharded` loaded, like `read` would. `group` is a
// sub-communicator of `comm` holding this rank (the DP group); failures are
// agreed over `comm`. Collective over `comm`.
Node TwoStageLoad(const Node& sharded, const ReadShardsFn& read, Communicator& comm,
                  Communicator& group, ExchangeStats* stats = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_TWO_STAGE_H_
