#include "strategy/two_stage.h"

#include <exception>

#include "mapping/dict_utils.h"

namespace distckpt {

std::optional<ShardDistribution> LowestHolderDistribution(
    const std::vector<std::vector<ShardedTensor>>& shards_by_group_rank) {
  if (shards_by_group_rank.size() <= 1) return std::nullopt;
  ShardDistribution dist;
  for (size_t rank = 0; rank < shards_by_group_rank.size(); ++rank) {
    for (const ShardedTensor& t : shards_by_group_rank[rank]) {
      if (HasNoElements(t)) continue;  // nothing to read; its id may be a non-empty shard's
      ShardId id = ShardIdOf(t);
      std::vector<int>& ranks = dist.all_ranks_for_shard[id];
      if (ranks.empty() || ranks.back() != static_cast<int>(rank))
        ranks.push_back(static_cast<int>(rank));
      dist.shard_to_metadata.try_emplace(id, t.WithoutData());
      dist.shards_in_this_group.insert(id);
    }
  }
  for (const auto& [id, ranks] : dist.all_ranks_for_shard) {  // ShardId order
    dist.assignment.emplace_back(id, ranks.front());
    dist.main_rank_for_shard.emplace(id, ranks.front());
  }
  return dist;
}

Node TwoStageLoad(const Node& sharded, const ReadShardsFn& read, Communicator& comm,
                  Communicator& group, ExchangeStats* stats) {
  std::optional<ShardDistribution> dist;
  if (group.size() > 1) dist = LowestHolderDistribution(GatherGroupShards(sharded, group));
  if (!dist) {
    Node loaded;
    AgreeOnOutcome(comm, [&] { loaded = read(sharded); });
    return loaded;
  }
  std::vector<ShardRoute> routes = RoutesOf(*dist);
  std::set<ShardId> routed;
  for (const ShardRoute& route : routes) routed.insert(route.id);

  // Stage 1: what this rank alone needs, read now; the rest comes in stage 2.
  std::map<ShardId, ShardedTensor> own, wanted;
  std::map<std::string, ShardedObject> objects_to_read;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (HasNoElements(*t)) return;  // ReplaceShardedLeaves fills it
      ShardId id = ShardIdOf(*t);
      if (!routed.contains(id) || dist->MainRank(id) == group.rank()) own.try_emplace(id, *t);
      if (routed.contains(id) && dist->MainRank(id) != group.rank()) wanted.try_emplace(id, *t);
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      objects_to_read.try_emplace(o->UniqueKey(), *o);
    }
  });
  std::map<ShardId, Tensor> loaded;
  std::map<std::string, nlohmann::json> objects;
  AgreeOnOutcome(comm, [&] {
    List items;
    for (const auto& [id, t] : own) {
      if (!routed.contains(id)) items.emplace_back(t);
    }
    for (const auto& [unique_key, o] : objects_to_read) items.emplace_back(o);
    Node values = read(Node(std::move(items)));
    auto value = values.as<List>().begin();
    for (const auto& [id, t] : own) {
      if (!routed.contains(id)) loaded[id] = (value++)->as<Tensor>();
    }
    for (const auto& [unique_key, o] : objects_to_read)
      objects[unique_key] = (value++)->as<nlohmann::json>();
  });

  // Stage 2: the owner reads each shared shard just before broadcasting it.
  std::exception_ptr error;
  try {
    auto provide = [&](const ShardId& id) {
      Node value = read(Node(List{Node(own.at(id))}));
      return loaded[id] = value.as<List>().front().as<Tensor>();
    };
    loaded.merge(BroadcastShards(routes, provide, wanted, group, stats));
  } catch (...) {
    error = std::current_exception();
  }
  Node out;
  AgreeOnOutcome(comm, [&] {
    if (error) std::rethrow_exception(error);
    out = ReplaceShardedLeaves(sharded, loaded, objects);
  });
  return out;
}

}  // namespace distckpt
