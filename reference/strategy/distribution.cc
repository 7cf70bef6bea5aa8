#include "strategy/distribution.h"

#include <algorithm>
#include <tuple>

#include "mapping/dict_utils.h"
#include "mapping/py_format.h"
#include "mapping/validation.h"
#include "wire/messages.h"

namespace distckpt {
namespace {

std::string PyIntTuple(const std::vector<int64_t>& values) {
  std::vector<std::string> parts;
  for (int64_t v : values) parts.push_back(std::to_string(v));
  return PyTuple(parts);
}

}  // namespace

bool operator<(const ShardId& a, const ShardId& b) {
  auto range = [](const ShardId& id) {
    // Python compares None only with None here (a key's shards are all
    // flattened or none is); "no range first" keeps the order total.
    return id.flat ? std::make_tuple(1, id.flat->start, id.flat->stop)
                   : std::make_tuple(0, int64_t{0}, int64_t{0});
  };
  return std::tie(a.key, a.global_offset) < std::tie(b.key, b.global_offset) ||
         (std::tie(a.key, a.global_offset) == std::tie(b.key, b.global_offset) &&
          range(a) < range(b));
}

std::string ShardId::ToString() const {
  return PyTuple({PyRepr(key), PyIntTuple(global_offset),
                  flat ? PyIntTuple({flat->start, flat->stop}) : "None"});
}

ShardId ShardIdOf(const ShardedTensor& tensor) {
  return {tensor.key, tensor.global_offset, tensor.flattened_range};
}

uint64_t ShardBytes(const ShardedTensor& tensor) {
  int64_t numel =
      tensor.flattened_range ? tensor.flattened_range->size() : Volume(tensor.local_shape);
  return static_cast<uint64_t>(numel) * DTypeSize(tensor.dtype);
}

bool HasNoElements(const ShardedTensor& tensor) { return ShardBytes(tensor) == 0; }

int ShardDistribution::MainRank(const ShardId& id) const {
  auto it = main_rank_for_shard.find(id);
  return it == main_rank_for_shard.end() ? -1 : it->second;
}

std::vector<std::pair<ShardId, int>> DistributeShardsToRanks(
    const std::map<ShardId, std::vector<int>>& shard_to_ranks,
    const std::map<ShardId, uint64_t>& shard_to_size, int num_ranks,
    const std::set<ShardId>& cross_group_loads) {
  struct Entry {
    int cross;
    size_t coverage;
    uint64_t size;
    const ShardId* id;
    const std::vector<int>* ranks;
  };
  std::vector<Entry> order;
  order.reserve(shard_to_ranks.size());
  for (const auto& [id, ranks] : shard_to_ranks) {
    order.push_back(
        {cross_group_loads.contains(id) ? 1 : 0, ranks.size(), shard_to_size.at(id), &id, &ranks});
  }
  // Megatron's key: (cross, len(ranks), -size, shard_id).
  std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    if (a.cross != b.cross) return a.cross < b.cross;
    if (a.coverage != b.coverage) return a.coverage < b.coverage;
    if (a.size != b.size) return a.size > b.size;
    return *a.id < *b.id;
  });
  std::vector<uint64_t> load(num_ranks, 0);
  std::vector<std::pair<ShardId, int>> assignment;
  assignment.reserve(order.size());
  for (const Entry& e : order) {
    // min((load[r], r)): least loaded holder, ties to the lowest rank.
    int best = -1;
    for (int r : *e.ranks) {
      if (best < 0 || std::tie(load[r], r) < std::tie(load[best], best)) best = r;
    }
    load[best] += e.size;
    assignment.emplace_back(*e.id, best);
  }
  return assignment;
}

std::optional<ShardDistribution> ComputeDistribution(
    const std::vector<std::vector<ShardedTensor>>& shards_by_group_rank, bool ignore_groups) {
  const int num_ranks = static_cast<int>(shards_by_group_rank.size());
  if (num_ranks <= 1) return std::nullopt;
  ShardDistribution dist;
  std::map<ShardId, uint64_t> shard_to_size;
  std::set<ShardId> has_main, has_non_main;
  for (int rank = 0; rank < num_ranks; ++rank) {
    for (const ShardedTensor& t : shards_by_group_rank[rank]) {
      if (HasNoElements(t)) continue;
      ShardId id = ShardIdOf(t);
      std::vector<int>& ranks = dist.all_ranks_for_shard[id];
      // A rank holding one shard twice counts once (Megatron lists it twice).
      if (ranks.empty() || ranks.back() != rank) ranks.push_back(rank);
      if (shard_to_size.try_emplace(id, ShardBytes(t)).second) {
        dist.shard_to_metadata.emplace(id, t.WithoutData());
      }
      (IsMainReplica(t.replica_id) ? has_main : has_non_main).insert(id);
    }
  }
  dist.shards_in_this_group = has_main;
  std::set<ShardId> cross_group_loads;
  if (ignore_groups) {
    for (const ShardId& id : has_non_main) {
      if (dist.shards_in_this_group.insert(id).second) cross_group_loads.insert(id);
    }
  }
  std::erase_if(dist.all_ranks_for_shard, [&](const auto& entry) {
    return !dist.shards_in_this_group.contains(entry.first);
  });
  dist.assignment = DistributeShardsToRanks(dist.all_ranks_for_shard, shard_to_size, num_ranks,
                                            cross_group_loads);
  for (const auto& [id, rank] : dist.assignment) dist.main_rank_for_shard.emplace(id, rank);
  return dist;
}

std::vector<ShardedTensor> LocalShards(const Node& sharded) {
  std::vector<ShardedTensor> shards;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) shards.push_back(t->WithoutData());
  });
  return shards;
}

std::vector<std::vector<ShardedTensor>> GatherGroupShards(const Node& sharded,
                                                          Communicator& group) {
  std::vector<ShardedTensor> mine = LocalShards(sharded);
  LocalMetadata md(mine.begin(), mine.end());
  std::vector<std::vector<ShardedTensor>> all;
  std::vector<std::string> messages = group.AllGather(EncodeShardedMetadata(md));
  for (size_t r = 0; r < messages.size(); ++r) {
    std::vector<ShardedTensor>& rank_shards = all.emplace_back();
    for (const ShardedMeta& m : DecodeShardedMetadata(messages[r], static_cast<int>(r))) {
      rank_shards.push_back(std::get<ShardedTensor>(m));
    }
  }
  return all;
}

std::optional<ShardDistribution> DetermineMainReplicaUniformDistribution(const Node& sharded,
                                                                         Communicator& group,
                                                                         bool ignore_groups) {
  if (group.size() <= 1) return std::nullopt;
  return ComputeDistribution(GatherGroupShards(sharded, group), ignore_groups);
}

void DistributeMainReplicas(Node& sharded, int group_rank, const ShardDistribution& distribution) {
  ForEachLeaf(sharded, [&](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      t->replica_id = {distribution.MainRank(ShardIdOf(*t)) == group_rank ? 0 : 1};
    }
  });
}

}  // namespace distckpt
