// The distribution greedy against the expected maps of Megatron's
// test_fully_parallel.py (docs/megatron-semantics.md §9.2 rows 11, 12, 16-19), on
// its world of 8 ranks, computed from every rank's shard metadata.
#include "strategy/distribution.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <utility>

#include "strategy/testing.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;
using KeyToRanks = std::map<std::string, std::vector<int>>;
using ShardsOfRank = std::function<std::vector<ShardedTensor>(int rank)>;

constexpr int kWorld = 8;

ShardedTensor Meta(const std::string& key, Shape local, std::vector<RankOffset> offsets,
                   int64_t replica = 0) {
  return ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, std::move(local), offsets, {replica});
}

const ShardsOfRank MegatronStateDict = MegatronFullyParallelShards;

std::vector<std::vector<ShardedTensor>> ShardsOfGroup(const std::vector<int>& group,
                                                      const ShardsOfRank& shards) {
  std::vector<std::vector<ShardedTensor>> out;
  for (int rank : group) out.push_back(shards(rank));
  return out;
}

std::vector<int> World() { return {0, 1, 2, 3, 4, 5, 6, 7}; }

// Megatron's map_reduce over main_rank_for_shard: key -> ranks in assignment order.
KeyToRanks ByKey(const ShardDistribution& dist) {
  KeyToRanks out;
  for (const auto& [id, rank] : dist.assignment) out[id.key].push_back(rank);
  return out;
}

TEST(DistributionTest, ShardIdOrdersLikePythonTuples) {
  ShardId a{"keyB", {0}, std::nullopt}, b{"keyB", {0, 0}, std::nullopt},
      c{"keyB", {1}, std::nullopt};
  ShardId d{"key_TP", {0}, std::nullopt}, e{"keyB", {0}, FlatRange{0, 4}};
  EXPECT_LT(a, b);  // a shorter tuple with equal prefix sorts first
  EXPECT_LT(b, c);
  EXPECT_LT(c, d);  // 'B' < '_'
  EXPECT_LT(a, e);
  EXPECT_FALSE(a < a);
  EXPECT_EQ(e.ToString(), "('keyB', (0,), (0, 4))");
  EXPECT_EQ(a.ToString(), "('keyB', (0,), None)");
}

TEST(DistributionTest, GreedyPrefersLowCoverageThenSizeThenIdAndLeastLoadedRank) {
  auto id = [](const std::string& key) { return ShardId{key, {0}, std::nullopt}; };
  std::map<ShardId, std::vector<int>> ranks{
      {id("a"), {0, 1, 2}}, {id("b"), {1}}, {id("c"), {0, 1, 2}}, {id("d"), {0, 1, 2}}};
  std::map<ShardId, uint64_t> size{{id("a"), 10}, {id("b"), 100}, {id("c"), 10}, {id("d"), 50}};
  auto out = DistributeShardsToRanks(ranks, size, 3);
  // b (coverage 1) -> 1; d (largest of the rest) -> 0; a -> 2; c -> 2 (load 10 < 50 < 100).
  EXPECT_THAT(out, ElementsAre(std::pair{id("b"), 1}, std::pair{id("d"), 0}, std::pair{id("a"), 2},
                               std::pair{id("c"), 2}));
  // Cross-group loads come last whatever their coverage.
  out = DistributeShardsToRanks(ranks, size, 3, {id("b")});
  EXPECT_EQ(out.back(), (std::pair{id("b"), 1}));
}

TEST(DistributionTest, GroupOfOneRankHasNoDistribution) {
  EXPECT_FALSE(ComputeDistribution({MegatronStateDict(0)}, false).has_value());
}

// test_save_distribution[parallelization_along_dp=False].
TEST(DistributionTest, MegatronSaveDistributionOverWorld) {
  auto dist = ComputeDistribution(ShardsOfGroup(World(), MegatronStateDict), false);
  ASSERT_TRUE(dist);
  EXPECT_EQ(ByKey(*dist), (KeyToRanks{{"keyB", {0, 1, 2, 3, 4, 5, 6, 7}},
                                      {"key_TP_repl1", {0, 1}},
                                      {"key_TP_repl2", {2, 3}},
                                      {"keyD", {4}},
                                      {"keyC", {5}},
                                      {"keyE", {6}}}));
}

// test_*_distribution along DP on tp=2,dp=4: the distributions of the DP
// groups of TP rank 0 and 1.
std::pair<std::optional<ShardDistribution>, std::optional<ShardDistribution>> DistributionsAlongDp(
    bool is_loading) {
  Topology topo = Topology::Parse("tp=2,dp=4");
  return {ComputeDistribution(ShardsOfGroup(topo.Group(0, MeshDim::kDp), MegatronStateDict),
                              is_loading),
          ComputeDistribution(ShardsOfGroup(topo.Group(1, MeshDim::kDp), MegatronStateDict),
                              is_loading)};
}

// TP rank 0's group holds every main replica: the same for save and load.
const KeyToRanks kTpRank0AlongDp = {{"keyB", {0, 1, 2, 3}}, {"keyD", {0}},
                                    {"keyC", {1}},          {"keyE", {2}},
                                    {"key_TP_repl1", {3}},  {"key_TP_repl2", {3}}};

// test_save_distribution[parallelization_along_dp=True]: DP groups of TP2.
TEST(DistributionTest, MegatronSaveDistributionAlongDp) {
  auto [tp0, tp1] = DistributionsAlongDp(false);
  ASSERT_TRUE(tp0 && tp1);
  EXPECT_EQ(ByKey(*tp0), kTpRank0AlongDp);
  // C, D, E have their main replica in the other group.
  EXPECT_EQ(ByKey(*tp1),
            (KeyToRanks{{"keyB", {0, 1, 2, 3}}, {"key_TP_repl1", {0}}, {"key_TP_repl2", {1}}}));
}

// An FSDP rank without rows holds an empty shard at the offset where the
// next rows start: same ShardId as the rank holding them. It must not be a
// holder (found by property 6: the save wrote nothing for those rows).
TEST(DistributionTest, EmptyShardsAreNotDistributed) {
  ShardedTensor rows;
  rows.key = "w";
  rows.dtype = DType::kF32;
  rows.global_shape = {2, 3};
  rows.local_shape = {2, 3};
  rows.global_offset = {0, 0};
  ShardedTensor none = rows;
  none.local_shape = {0, 3};
  for (bool ignore_groups : {false, true}) {
    auto dist = ComputeDistribution({{none}, {rows}, {none}}, ignore_groups);
    ASSERT_TRUE(dist);
    const ShardId id = ShardIdOf(rows);
    EXPECT_EQ(ShardIdOf(none), id);
    EXPECT_THAT(dist->assignment, ElementsAre(std::make_pair(id, 1)));
    EXPECT_EQ(dist->all_ranks_for_shard.at(id), (std::vector<int>{1}));
  }
  auto only_empty = ComputeDistribution({{none}, {none}}, false);
  ASSERT_TRUE(only_empty);
  EXPECT_TRUE(only_empty->assignment.empty());
}

// The replica ids a fully parallel save writes with: int(not saved_by_me).
TEST(DistributionTest, RewritesReplicaIdsToSavedByThisRank) {
  auto dist = ComputeDistribution(ShardsOfGroup(World(), MegatronStateDict), false);
  ASSERT_TRUE(dist);
  std::map<int, std::set<std::string>> saved_keys;
  for (int rank = 0; rank < kWorld; ++rank) {
    Dict state;
    for (const ShardedTensor& t : MegatronStateDict(rank)) state["sd_" + t.key] = Node(t);
    Node tree(std::move(state));
    DistributeMainReplicas(tree, rank, *dist);
    for (const ShardedTensor& t : LocalShards(tree)) {
      if (IsMainReplica(t.replica_id)) saved_keys[rank].insert(t.key);
      EXPECT_EQ(t.replica_id, ReplicaId{dist->MainRank(ShardIdOf(t)) == rank ? 0 : 1});
    }
  }
  EXPECT_EQ(saved_keys[0], (std::set<std::string>{"keyB", "key_TP_repl1"}));
  EXPECT_EQ(saved_keys[3], (std::set<std::string>{"keyB", "key_TP_repl2"}));
  EXPECT_EQ(saved_keys[4], (std::set<std::string>{"keyB", "keyD"}));
  EXPECT_EQ(saved_keys[7], (std::set<std::string>{"keyB"}));
}

// test_load_distribution[parallelize_within_dp=True]: the TP-rank-1 group
// loads C, D, E across groups, assigned after its own shards.
TEST(DistributionTest, MegatronLoadDistributionAlongDp) {
  auto [tp0, tp1] = DistributionsAlongDp(true);
  ASSERT_TRUE(tp0 && tp1);
  EXPECT_EQ(ByKey(*tp0), kTpRank0AlongDp);
  EXPECT_EQ(ByKey(*tp1), (KeyToRanks{{"keyB", {0, 1, 2, 3}},
                                     {"key_TP_repl1", {0}},
                                     {"key_TP_repl2", {1}},
                                     {"keyD", {2}},
                                     {"keyC", {3}},
                                     {"keyE", {0}}}));
  EXPECT_EQ(tp1->assignment.back().first.key, "keyE");
}

// test_load_distribution[parallelize_within_dp=False]: same as saving.
TEST(DistributionTest, MegatronLoadDistributionOverWorld) {
  auto dist = ComputeDistribution(ShardsOfGroup(World(), MegatronStateDict), true);
  ASSERT_TRUE(dist);
  EXPECT_EQ(ByKey(*dist),
            ByKey(*ComputeDistribution(ShardsOfGroup(World(), MegatronStateDict), false)));
}

// TestCrossRanksReads: placements name -> (tp, dp) holders, the first one
// main; every shard is torch.ones(1).
using Placement = std::map<std::string, std::vector<std::pair<int, int>>>;

struct Reads {
  std::map<std::string, int> saving_rank;                 // key -> global rank
  std::map<int, std::map<std::string, int>> same, cross;  // rank -> key -> file's rank
};

Reads CrossRankReads(int tp_size, const Placement& placement) {
  Topology topo = Topology::Parse(fmt::format("tp={},dp={}", tp_size, kWorld / tp_size));
  auto shards = [&](int rank) {
    RankCoords c = topo.Coords(rank);
    std::vector<ShardedTensor> out;
    for (const auto& [name, holders] : placement) {
      for (const auto& holder : holders) {
        if (holder == std::pair{c.tp, c.dp})
          out.push_back(Meta(name, {1}, {}, holder == holders[0] ? 0 : 1));
      }
    }
    return out;
  };
  Reads reads;
  std::map<int, std::set<std::string>> loads;  // rank -> keys it reads from storage
  for (int tp = 0; tp < tp_size; ++tp) {
    std::vector<int> group = topo.Group(tp, MeshDim::kDp);
    auto saving = ComputeDistribution(ShardsOfGroup(group, shards), false);
    auto loading = ComputeDistribution(ShardsOfGroup(group, shards), true);
    for (size_t i = 0; i < group.size(); ++i) {
      for (const ShardedTensor& t : shards(group[i])) {
        if (saving ? saving->MainRank(ShardIdOf(t)) == static_cast<int>(i)
                   : IsMainReplica(t.replica_id)) {
          reads.saving_rank[t.key] = group[i];
        }
        if (!loading || loading->MainRank(ShardIdOf(t)) == static_cast<int>(i))
          loads[group[i]].insert(t.key);
      }
    }
  }
  for (const auto& [rank, keys] : loads) {
    for (const std::string& key : keys) {
      int from = reads.saving_rank.at(key);
      (from == rank ? reads.same : reads.cross)[rank][key] = from;
    }
  }
  return reads;
}

TEST(DistributionTest, CrossRanksReadsFullDp) {
  std::vector<std::pair<int, int>> all;
  for (int dp = 0; dp < kWorld; ++dp) all.emplace_back(0, dp);
  Reads r = CrossRankReads(1, {{"a", {{0, 0}}}, {"b", {{0, 1}}}, {"c", all}});
  EXPECT_TRUE(r.cross.empty());
  // `c` is saved by rank 2 because ranks 0 and 1 already save `a` and `b`.
  EXPECT_EQ(r.same, (std::map<int, std::map<std::string, int>>{
                        {0, {{"a", 0}}}, {1, {{"b", 1}}}, {2, {{"c", 2}}}}));
}

TEST(DistributionTest, CrossRanksReadsSingletonDp) {
  std::vector<std::pair<int, int>> all;
  for (int tp = 0; tp < kWorld; ++tp) all.emplace_back(tp, 0);
  Reads r = CrossRankReads(8, {{"a", {{0, 0}}}, {"b", {{1, 0}}}, {"c", all}});
  for (int rank = 1; rank < kWorld; ++rank) {
    EXPECT_EQ(r.cross[rank], (std::map<std::string, int>{{"c", 0}})) << rank;
  }
  EXPECT_EQ(r.same, (std::map<int, std::map<std::string, int>>{{0, {{"a", 0}, {"c", 0}}},
                                                               {1, {{"b", 1}}}}));
}

TEST(DistributionTest, CrossRanksReadsOutOfOrder) {
  Reads r = CrossRankReads(1, {{"a", {{0, 2}}}});
  EXPECT_TRUE(r.cross.empty());
  EXPECT_EQ(r.same, (std::map<int, std::map<std::string, int>>{{2, {{"a", 2}}}}));
}

TEST(DistributionTest, CrossDpAccessDoesNotDisturbTheDistribution) {
  std::vector<std::pair<int, int>> all;
  for (int tp = 0; tp < 2; ++tp) {
    for (int dp = 0; dp < 4; ++dp) all.emplace_back(tp, dp);
  }
  Reads r = CrossRankReads(2, {{"a", {{0, 0}}},
                               {"b", all},
                               {"c", {{0, 0}, {0, 1}, {0, 2}}},
                               {"d", {{1, 0}, {0, 0}, {1, 3}}},
                               {"e", {{1, 0}, {1, 2}}},
                               {"f", {{1, 0}, {0, 0}, {1, 2}}},
                               {"g", {{1, 3}}}});
  EXPECT_EQ(r.saving_rank,
            (std::map<std::string, int>{
                {"a", 0}, {"b", 4}, {"c", 2}, {"d", 1}, {"e", 5}, {"f", 1}, {"g", 7}}));
  EXPECT_EQ(r.cross, (std::map<int, std::map<std::string, int>>{{0, {{"d", 1}, {"f", 1}}},
                                                                {3, {{"b", 4}}}}));
}

}  // namespace
}  // namespace distckpt
