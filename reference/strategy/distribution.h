// Fully parallel shard distribution (docs/megatron-semantics.md §4.2): which rank of
// a parallelization group writes (on save) or reads (on load) each shard that
// several ranks of the group hold, balanced by Megatron's deterministic
// greedy, so every unique shard is handled by exactly one rank.
//
// Shards are identified by ShardId = (key, global_offset, flattened range),
// ordered like Python tuples (key, then offset, then range; no range first).
// The greedy visits shards sorted by (cross-group load ? 1 : 0, number of
// group ranks holding the shard, -size in bytes, ShardId) and gives each to
// the least loaded of its holders (ties: lowest group rank). The result is a
// pure function of every group rank's shard metadata, so all ranks compute
// the same one. ShardedObjects are not distributed, nor are shards with no
// elements (an FSDP rank without rows, a trailing torch.chunk): they have
// nothing to write or read, and their ShardId can be a non-empty shard's
// (same key and offset), whose holder they must not become.
//
// Thread-safety: pure functions and value types, except the collective
// DetermineMainReplicaUniformDistribution (one call per rank of the group).
#ifndef DISTCKPT_STRATEGY_DISTRIBUTION_H_
#define DISTCKPT_STRATEGY_DISTRIBUTION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/box.h"
#include "mapping/sharded_tensor.h"
#include "mapping/state_dict.h"

namespace distckpt {

// Megatron's _sharded_tensor_shard_id.
struct ShardId {
  std::string key;
  Shape global_offset;
  std::optional<FlatRange> flat;

  friend bool operator==(const ShardId&, const ShardId&) = default;
  friend bool operator<(const ShardId& a, const ShardId& b);
  std::string ToString() const;  // "('w', (0, 10), None)", "('w', (0,), (4, 9))"
};
ShardId ShardIdOf(const ShardedTensor& tensor);
// Bytes of the shard's local data (flattened range or chunk) in its dtype.
uint64_t ShardBytes(const ShardedTensor& tensor);
// True for a shard without elements (never distributed, nothing to exchange).
bool HasNoElements(const ShardedTensor& tensor);

struct ShardDistribution {
  // Group rank that writes / reads each shard, in assignment order (the
  // broadcast order of a fully parallel load).
  std::vector<std::pair<ShardId, int>> assignment;
  std::map<ShardId, int> main_rank_for_shard;
  std::set<ShardId> shards_in_this_group;
  std::map<ShardId, ShardedTensor> shard_to_metadata;       // first holder's, without data
  std::map<ShardId, std::vector<int>> all_ranks_for_shard;  // group ranks holding it, ascending

  // The group rank assigned to `id`; -1 when the shard is not in this group.
  int MainRank(const ShardId& id) const;
};

// distribute_shards_to_ranks: the greedy above over `num_ranks` group ranks.
// `shard_to_ranks` lists each shard's holders; `cross_group_loads` are
// visited last. Returns (shard, rank) in assignment order.
std::vector<std::pair<ShardId, int>> DistributeShardsToRanks(
    const std::map<ShardId, std::vector<int>>& shard_to_ranks,
    const std::map<ShardId, uint64_t>& shard_to_size, int num_ranks,
    const std::set<ShardId>& cross_group_loads = {});

// The distribution from the ShardedTensors of every group rank (index =
// group rank). Save (ignore_groups = false) distributes only shards whose
// main replica lives in this group; load (true) also those the group holds
// only as non-main replicas, after the others. nullopt for a group of one.
std::optional<ShardDistribution> ComputeDistribution(
    const std::vector<std::vector<ShardedTensor>>& shards_by_group_rank, bool ignore_groups);

// Every ShardedTensor leaf of `sharded`, without data, in leaf order.
std::vector<ShardedTensor> LocalShards(const Node& sharded);

// The ShardedTensors (without data) of every rank of `group`, by group
// rank: one all-gather of `sharded`'s metadata. Collective over `group`.
std::vector<std::vector<ShardedTensor>> GatherGroupShards(const Node& sharded, Communicator& group);

// determine_main_replica_uniform_distribution: GatherGroupShards, then
// ComputeDistribution (no collective for a group of one rank).
std::optional<ShardDistribution> DetermineMainReplicaUniformDistribution(const Node& sharded,
                                                                         Communicator& group,
                                                                         bool ignore_groups);

// distribute_main_replicas_with_precomputed_distribution: sets the replica
// id of every ShardedTensor leaf to 0 when `group_rank` handles its shard,
// else 1 (shards whose main replica lives in another group get 1 too).
void DistributeMainReplicas(Node& sharded, int group_rank, const ShardDistribution& distribution);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_DISTRIBUTION_H_
