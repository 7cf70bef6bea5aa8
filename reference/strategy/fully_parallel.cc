#include "strategy/fully_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>

#include "core/error.h"
#include "mapping/dict_utils.h"
#include "mapping/py_format.h"

namespace distckpt {
namespace {

// The parts of a request: what this rank reads, and what it waits for.
struct LoadSplit {
  std::map<ShardId, ShardedTensor> to_read, wanted;
  std::map<std::string, ShardedObject> objects_to_read;
  std::set<std::string> objects_wanted;
};

LoadSplit SplitRequest(const Node& sharded, const ShardDistribution& dist, int group_rank) {
  LoadSplit split;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (HasNoElements(*t)) return;  // nothing to read or receive; ReplaceShardedLeaves fills it
      ShardId id = ShardIdOf(*t);
      (dist.MainRank(id) == group_rank ? split.to_read : split.wanted).try_emplace(id, *t);
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      std::string unique_key = o->UniqueKey();
      if (IsMainReplica(o->replica_id))
        split.objects_to_read.try_emplace(unique_key, *o);
      else
        split.objects_wanted.insert(unique_key);
    }
  });
  return split;
}

// A load's distribution over `group` (nullopt for a group of one rank): the
// cached one when every group rank's plan is current (one all-reduce), else
// computed (one all-gather) and cached.
std::optional<ShardDistribution> LoadDistribution(const Node& sharded, Communicator& group,
                                                  PlanCache* cache) {
  if (group.size() <= 1) return std::nullopt;
  if (cache == nullptr) return DetermineMainReplicaUniformDistribution(sharded, group, true);
  const uint64_t fingerprint = PlanFingerprint(
      sharded, fmt::format("fully parallel load|{}|{}", group.rank(), group.size()));
  if (PlanReusable(*cache, fingerprint, group)) {
    ++cache->hits;
    return cache->distribution;
  }
  PlanCache fresh;  // nothing of an earlier save's plan stays
  fresh.filled = true;
  fresh.fingerprint = fingerprint;
  fresh.distribution = DetermineMainReplicaUniformDistribution(sharded, group, true);
  fresh.hits = cache->hits;
  *cache = std::move(fresh);
  return cache->distribution;
}

}  // namespace

std::optional<ShardDistribution> ApplySavingParallelization(Node& sharded, Communicator& group,
                                                            const ShardDistribution* reused) {
  std::optional<ShardDistribution> dist;
  if (reused)
    dist = *reused;
  else if (group.size() > 1)
    dist = DetermineMainReplicaUniformDistribution(sharded, group, /*ignore_groups=*/false);
  if (dist) DistributeMainReplicas(sharded, group.rank(), *dist);
  return dist;
}

Node FullyParallelLoad(const Node& sharded, const ReadShardsFn& read, Communicator& comm,
                       Communicator& group, ExchangeAlgorithm exchange, PlanCache* cache,
                       ExchangeStats* stats) {
  std::optional<ShardDistribution> dist = LoadDistribution(sharded, group, cache);
  if (!dist) {  // a group of one: plain load
    Node loaded;
    AgreeOnOutcome(comm, [&] { loaded = read(sharded); });
    return loaded;
  }
  LoadSplit split = SplitRequest(sharded, *dist, group.rank());

  std::map<ShardId, Tensor> loaded;
  std::map<std::string, nlohmann::json> loaded_objects;
  AgreeOnOutcome(comm, [&] {
    List items;
    for (const auto& [id, t] : split.to_read) items.emplace_back(t);
    for (const auto& [unique_key, o] : split.objects_to_read) items.emplace_back(o);
    Node values = read(Node(std::move(items)));
    auto value = values.as<List>().begin();
    for (const auto& [id, t] : split.to_read) loaded[id] = (value++)->as<Tensor>();
    for (const auto& [unique_key, o] : split.objects_to_read)
      loaded_objects[unique_key] = (value++)->as<nlohmann::json>();
  });

  // Both exchanges run to completion on every rank; failures are agreed after.
  std::exception_ptr error;
  std::map<ShardId, Tensor> received;
  std::map<std::string, nlohmann::json> objects;
  try {
    std::vector<ShardRoute> routes = RoutesOf(*dist);
    if (exchange == ExchangeAlgorithm::kBroadcast) {
      auto provide = [&](const ShardId& id) -> Tensor {
        auto it = loaded.find(id);
        if (it == loaded.end())
          Fail(ErrorKind::kIncomplete, "shard {} was not loaded", id.ToString());
        return it->second;
      };
      received = BroadcastShards(routes, provide, split.wanted, group, stats);
    } else {
      received = GatherRoundsShards(routes, loaded, split.wanted, group, stats);
    }
  } catch (...) {
    error = std::current_exception();
  }
  try {
    objects = GatherObjects(loaded_objects, comm);
  } catch (...) {
    if (!error) error = std::current_exception();
  }

  Node out;
  AgreeOnOutcome(comm, [&] {
    if (error) std::rethrow_exception(error);
    std::vector<std::string> missing;
    for (const auto& [id, t] : split.wanted) {
      if (!received.contains(id)) missing.push_back(id.ToString());
    }
    if (!missing.empty()) {
      Fail(ErrorKind::kIncomplete, "Missing shards after fully parallel loading: {{{}}}",
           fmt::join(missing, ", "));
    }
    std::set<std::string> missing_objects;
    for (const std::string& unique_key : split.objects_wanted) {
      if (!objects.contains(unique_key)) missing_objects.insert(unique_key);
    }
    if (!missing_objects.empty()) {
      Fail(ErrorKind::kIncomplete, "Missing object shards after fully parallel loading: {}",
           PyStrSet(missing_objects));
    }
    received.merge(loaded);
    out = ReplaceShardedLeaves(sharded, received, objects);
  });
  return out;
}

}  // namespace distckpt
