// Exchange after a fully parallel or two-stage load (docs/megatron-semantics.md
// §4.3, exchange_utils.py): every shard some group ranks hold but did not
// read from storage comes from the group rank that did.
//
//   broadcast      shards one at a time, in the distribution's assignment
//                  order: the owner broadcasts, holders copy the bytes into
//                  their destination (converting dtype if theirs differs).
//                  Extra memory: one shard's bytes at a time.
//   gather_rounds  per dtype (by name), round k all-gathers every rank's
//                  k-th read shard. Fewer collectives, a round's worth of
//                  extra memory.
// Shards held by one rank only are never exchanged. Objects go through one
// all-gather over the whole communicator (Megatron's all_gather_object over
// WORLD), whatever the parallelization group.
//
// Failures (a read that failed on the owner, a size that does not match)
// never leave a rank out of a collective: every exchange runs to the end and
// then throws on the ranks concerned; callers agree on the outcome.
//
// Thread-safety: collective; one call per rank of the group.
#ifndef DISTCKPT_STRATEGY_EXCHANGE_H_
#define DISTCKPT_STRATEGY_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "strategy/distribution.h"

namespace distckpt {

enum class ExchangeAlgorithm { kBroadcast, kGatherRounds };
// "broadcast" | "gather_rounds"; else CheckpointError(kInvalidArgument)
// "Unrecognized gather algorithm: <name>" (Megatron's message for an unknown algorithm).
ExchangeAlgorithm ParseExchangeAlgorithm(std::string_view name);
std::string_view ExchangeAlgorithmName(ExchangeAlgorithm algorithm);

struct ExchangeStats {
  uint64_t collectives = 0;        // broadcasts / all-gathers carrying shard data
  uint64_t bytes_received = 0;     // shard bytes this rank took from other ranks
  uint64_t peak_buffer_bytes = 0;  // largest exchange buffer alive at once on this rank
};

// Where one shard goes: its owner (group rank that provides it) and every
// group rank holding it (ascending).
struct ShardRoute {
  ShardId id;
  int owner = 0;
  std::vector<int> holders;
  DType dtype = DType::kF32;
};

// The routes of a distribution in assignment order, without shards held by
// one rank only.
std::vector<ShardRoute> RoutesOf(const ShardDistribution& distribution);

// Produces, on the owner, the tensor of a shard (already read, or read now).
using ProvideShardFn = std::function<Tensor(const ShardId& id)>;

// Broadcasts every route's shard from its owner within `group`; returns the
// shards of `wanted` (this rank's requests for shards it does not own; a
// defined `data` is filled in place, else allocated) by id. Collective over
// `group`. Throws, after the last broadcast, the first failure seen.
std::map<ShardId, Tensor> BroadcastShards(const std::vector<ShardRoute>& routes,
                                          const ProvideShardFn& provide,
                                          const std::map<ShardId, ShardedTensor>& wanted,
                                          Communicator& group, ExchangeStats* stats);

// gather_rounds over the same routes; `loaded` holds the shards this rank owns.
std::map<ShardId, Tensor> GatherRoundsShards(const std::vector<ShardRoute>& routes,
                                             const std::map<ShardId, Tensor>& loaded,
                                             const std::map<ShardId, ShardedTensor>& wanted,
                                             Communicator& group, ExchangeStats* stats);

// `sharded` with every ShardedTensor leaf replaced by tensors[its ShardId]
// (copied into the leaf's own buffer when it has one the tensor does not
// share), except leaves with no elements (their own empty data), and every
// ShardedObject by objects[its unique key]. Rank-local.
Node ReplaceShardedLeaves(const Node& sharded, const std::map<ShardId, Tensor>& tensors,
                          const std::map<std::string, nlohmann::json>& objects);

// exchange_loaded_objects_gather_object: every rank's loaded objects (by
// unique key) to every rank. An object loaded by two ranks is
// CheckpointError(kInvalidSharding) "Duplicate shard ids loaded by different
// ranks: {...}". Collective over `comm`.
std::map<std::string, nlohmann::json> GatherObjects(
    const std::map<std::string, nlohmann::json>& loaded, Communicator& comm);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_EXCHANGE_H_
