// Property 6: the fully parallel distribution (reference/strategy/
// distribution.h, Megatron's distribute_shards_to_ranks). For the shards a
// generated state puts on each rank of a parallelization group (each DP x CP
// group of the topology, i.e. ranks sharing (tp, pp), and the whole world),
// on save (main replicas in the group) and on load (every shard the group
// holds, ignore_groups):
//  - deterministic: the same assignment from the same metadata, whatever the
//    order of each rank's shard list, and, through the all-gather of
//    DetermineMainReplicaUniformDistribution on threads, the same on every
//    group rank;
//  - each unique shard is assigned exactly once, to a group rank that holds
//    it: save assigns exactly the shards with a main replica in the group,
//    load also those held only as non-main replicas, after the others;
//    shards with no elements are not distributed (an FSDP rank without rows
//    holds an empty shard with the ShardId of the next rank's rows: this
//    property found fully parallel saves writing nothing for those rows);
//  - the greedy's balance bound. The greedy gives shard s to the least loaded
//    of its holders H(s), and loads only grow, so for every rank r and the
//    last shard s assigned to r:
//        load(r) - size(s) <= load(h)   for every h in H(s)            (B1)
//    (final loads). When every shard is held by all n group ranks
//    ("replicated"), r was the least loaded of all n ranks when s came, so
//        n * (load(r) - size(s)) <= total - size(s),                    (B2)
//    hence max load <= total / n + largest shard <= 2 * optimum (the
//    optimum is at least max(total / n, largest shard)).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "comm/thread_world.h"
#include "harness/expand/rank_state.h"
#include "mapping/validation.h"
#include "property/generators.h"
#include "property/harness.h"
#include "strategy/distribution.h"

namespace distckpt {
namespace {

// The shards `rank` saves or requests (save_preprocess and load_preprocess
// drop empty flattened ranges), without data.
std::vector<ShardedTensor> ShardsOf(const Scenario& s, const Topology& topo, int rank) {
  std::vector<ShardedTensor> out;
  for (const Param& p : ExpandRank(s, topo, rank).params) {
    for (const ShardedTensor& t : p.pieces) {
      if (t.flattened_range && t.flattened_range->size() == 0) continue;
      out.push_back(t.WithoutData());
    }
  }
  return out;
}

// Groups of the topology's ranks: every DP x CP group (ranks sharing tp and
// pp) and the whole world.
std::vector<std::vector<int>> GroupsOf(const Topology& topo) {
  std::map<std::pair<int, int>, std::vector<int>> by_tp_pp;
  for (int r = 0; r < topo.world_size(); ++r) {
    const RankCoords c = topo.Coords(r);
    by_tp_pp[{c.tp, c.pp}].push_back(r);
  }
  std::vector<std::vector<int>> groups;
  for (auto& [coords, ranks] : by_tp_pp) groups.push_back(ranks);
  std::vector<int> world(topo.world_size());
  for (int r = 0; r < topo.world_size(); ++r) world[r] = r;
  if (groups.size() > 1) groups.push_back(world);
  return groups;
}

bool SameDistribution(const ShardDistribution& a, const ShardDistribution& b) {
  return a.assignment == b.assignment && a.main_rank_for_shard == b.main_rank_for_shard &&
         a.shards_in_this_group == b.shards_in_this_group &&
         a.all_ranks_for_shard == b.all_ranks_for_shard;
}

// The checks above for one group and mode; the first problem, if any.
std::optional<std::string> CheckGroup(const std::vector<std::vector<ShardedTensor>>& shards,
                                      bool ignore_groups, std::set<std::string>& tags) {
  const int n = static_cast<int>(shards.size());
  const std::optional<ShardDistribution> dist = ComputeDistribution(shards, ignore_groups);
  if (!dist) return "no distribution for a group of more than one rank";
  // Determinism, whatever the order of each rank's list.
  std::vector<std::vector<ShardedTensor>> shuffled = shards;
  std::mt19937 rng(static_cast<unsigned>(shards.size() * 7919 + ignore_groups));
  for (auto& list : shuffled) std::shuffle(list.begin(), list.end(), rng);
  if (!SameDistribution(*ComputeDistribution(shards, ignore_groups), *dist) ||
      !SameDistribution(*ComputeDistribution(shuffled, ignore_groups), *dist)) {
    return "the distribution changes with the order of the ranks' shard lists or between calls";
  }
  // Oracle: holders, main replicas, sizes.
  std::map<ShardId, std::set<int>> holders;
  std::set<ShardId> with_main;
  std::map<ShardId, uint64_t> size;
  for (int r = 0; r < n; ++r) {
    for (const ShardedTensor& t : shards[r]) {
      if (t.LocalNumel() == 0) {  // nothing to write or read: not distributed
        tags.insert("empty-shards");
        continue;
      }
      const ShardId id = ShardIdOf(t);
      holders[id].insert(r);
      if (IsMainReplica(t.replica_id)) with_main.insert(id);
      size[id] = static_cast<uint64_t>(t.LocalNumel()) * DTypeSize(t.dtype);
    }
  }
  std::set<ShardId> expected = with_main;
  if (ignore_groups) {
    for (const auto& [id, h] : holders) expected.insert(id);
  }
  std::map<ShardId, int> seen;
  bool cross_started = false;
  for (const auto& [id, rank] : dist->assignment) {
    if (++seen[id] > 1) return fmt::format("shard {} assigned twice", id.ToString());
    if (!expected.count(id))
      return fmt::format("shard {} assigned but not the group's to handle", id.ToString());
    if (rank < 0 || rank >= n || !holders[id].count(rank)) {
      return fmt::format("shard {} assigned to group rank {}, which does not hold it (holders {})",
                         id.ToString(), rank, holders[id]);
    }
    if (dist->MainRank(id) != rank)
      return fmt::format("main_rank_for_shard of {} disagrees", id.ToString());
    const bool cross = !with_main.count(id);
    if (cross_started && !cross) {
      return fmt::format("shard {} with a main replica in the group comes after a cross-group one",
                         id.ToString());
    }
    cross_started |= cross;
  }
  if (seen.size() != expected.size()) {
    return fmt::format("{} of {} shards assigned", seen.size(), expected.size());
  }
  // Balance: (B1) for every rank, (B2) when every shard is held by all ranks.
  std::vector<uint64_t> load(n, 0);
  std::vector<const ShardId*> last(n, nullptr);
  uint64_t total = 0;
  bool replicated = true;
  for (const auto& [id, rank] : dist->assignment) {
    load[rank] += size[id];
    last[rank] = &id;
    total += size[id];
    replicated &= static_cast<int>(holders[id].size()) == n;
  }
  for (int r = 0; r < n; ++r) {
    if (!last[r]) continue;
    const uint64_t before = load[r] - size[*last[r]];
    for (int h : holders[*last[r]]) {
      if (before > load[h]) {
        return fmt::format(
            "(B1) rank {} had load {} when it got {} ({} bytes), more than holder {} "
            "ends with ({}): the shard did not go to the least loaded holder",
            r, before, last[r]->ToString(), size[*last[r]], h, load[h]);
      }
    }
    if (replicated && n * before > total - size[*last[r]]) {
      return fmt::format("(B2) rank {} load {} exceeds (total {} - {}) / {} + {}", r, load[r],
                         total, size[*last[r]], n, size[*last[r]]);
    }
  }
  // Classes.
  tags.insert(ignore_groups ? "load" : "save");
  if (dist->assignment.empty()) tags.insert("nothing-to-assign");
  if (!dist->assignment.empty()) tags.insert(replicated ? "replicated" : "restricted");
  if (expected.size() > with_main.size()) tags.insert("cross-group");
  std::map<std::pair<size_t, uint64_t>, int> ties;
  for (const auto& [id, rank] : dist->assignment) {
    if (++ties[{holders[id].size(), size[id]}] == 2) tags.insert("size-ties");
  }
  const uint64_t most = *std::max_element(load.begin(), load.end());
  if (std::count(load.begin(), load.end(), 0) > 0 && !dist->assignment.empty())
    tags.insert("idle-rank");
  if (replicated && n > 1 && most * n > total + total / 4)
    tags.insert("bound-tight");  // > 1.25 x mean
  for (const auto& [id, rank] : dist->assignment) {
    if (id.flat) tags.insert("flattened");
  }
  return std::nullopt;
}

// The distribution each group rank computes through the all-gather (threads
// as ranks) must be the pure function's.
std::optional<std::string> CheckOnEveryRank(const std::vector<std::vector<ShardedTensor>>& shards,
                                            bool ignore_groups) {
  const int n = static_cast<int>(shards.size());
  std::vector<std::optional<ShardDistribution>> got(n);
  RunRanks(n, [&](Communicator& comm) {
    Dict leaves;
    for (size_t i = 0; i < shards[comm.rank()].size(); ++i) {
      leaves[fmt::format("s{}", i)] = Node(shards[comm.rank()][i]);
    }
    got[comm.rank()] =
        DetermineMainReplicaUniformDistribution(Node(std::move(leaves)), comm, ignore_groups);
  });
  const std::optional<ShardDistribution> want = ComputeDistribution(shards, ignore_groups);
  for (int r = 0; r < n; ++r) {
    if (!got[r] || !SameDistribution(*got[r], *want)) {
      return fmt::format("group rank {} computes another distribution than the metadata gives", r);
    }
  }
  return std::nullopt;
}

TEST(DistributionProperty, DeterministicEachShardOnceToAHolderWithinTheGreedyBound) {
  GenLimits limits;
  limits.topologies = 1;
  limits.objects = false;
  CheckProperty({300,
                 {{"save", 0.9},
                  {"load", 0.9},
                  {"replicated", 0.3},
                  {"restricted", 0.3},
                  {"cross-group", 0.2},
                  {"size-ties", 0.2},
                  {"flattened", 0.05},
                  {"empty-shards", 0.05}}},
                [&] {
                  Scenario s = *GenScenario(limits);
                  const Topology topo = Topology::Parse(s.topologies.at(0));
                  std::vector<std::vector<ShardedTensor>> by_rank;
                  for (int r = 0; r < topo.world_size(); ++r)
                    by_rank.push_back(ShardsOf(s, topo, r));
                  std::set<std::string> tags;
                  bool on_every_rank_checked = false;
                  for (const std::vector<int>& group : GroupsOf(topo)) {
                    if (group.size() < 2) continue;
                    std::vector<std::vector<ShardedTensor>> shards;
                    for (int r : group) shards.push_back(by_rank[r]);
                    for (bool ignore_groups : {false, true}) {
                      std::optional<std::string> bad = CheckGroup(shards, ignore_groups, tags);
                      if (!bad && !on_every_rank_checked)
                        bad = CheckOnEveryRank(shards, ignore_groups);
                      if (bad) {
                        s.pairs = {MakePair(s.topologies[0], s.topologies[0])};
                        FailCase(s,
                                 fmt::format("group ranks {} ({}): {}", group,
                                             ignore_groups ? "load" : "save", *bad),
                                 fmt::format("property 6: the distribution over group ranks {} "
                                             "({}); `distckpt save FILE --topology {} --dir D "
                                             "--fully-parallel` distributes over each DP group",
                                             group, ignore_groups ? "load, ignore_groups" : "save",
                                             s.topologies[0]));
                      }
                    }
                    on_every_rank_checked = true;
                  }
                  if (tags.empty()) tags.insert("single-rank-groups");
                  Tag({tags.begin(), tags.end()});
                });
}

}  // namespace
}  // namespace distckpt
