// The strategy entry points dispatch to the strategy the description names,
// over the group it names (the call's communicator by default), with its
// exchange and cache: two equal replicated tensors "a" and "b" held by every
// rank show who writes and who reads each.
#include "strategy/strategy.h"

#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

constexpr int kWorld = 4;

// "a" and "b" (16 f32 each) replicated on every rank; rank 0 holds the main replicas.
Node Replicated(int rank) {
  Dict d;
  for (const char* key : {"a", "b"})
    d[key] = Node(ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, {16}, {}, {rank}));
  return Node(std::move(d));
}

// DP groups of TP2: {0, 2} and {1, 3}.
std::unique_ptr<Communicator> DpGroup(Communicator& comm) {
  return comm.Split(comm.rank() % 2, comm.rank());
}

// The keys whose main replica this rank writes after AssignWriters.
std::set<std::string> Writes(const Node& sharded) {
  std::set<std::string> keys;
  for (const ShardedTensor& t : LocalShards(sharded)) {
    if (IsMainReplica(t.replica_id)) keys.insert(t.key);
  }
  return keys;
}

TEST(AssignWritersTest, PlainLeavesTheWritersAloneWithoutACollective) {
  RunRanks(kWorld, [](Communicator& comm) {
    CountingCommunicator counting(comm);
    Node sharded = Replicated(comm.rank());
    EXPECT_FALSE(AssignWriters(SaveStrategy{}, sharded, counting).has_value());
    EXPECT_TRUE(counting.calls.empty());
    const std::set<std::string> all{"a", "b"}, none;
    EXPECT_EQ(Writes(sharded), comm.rank() == 0 ? all : none);
  });
}

TEST(AssignWritersTest, FullyParallelSpreadsTheWritersOverItsGroup) {
  RunRanks(kWorld, [](Communicator& comm) {
    Node world = Replicated(comm.rank());  // group: the save's communicator
    ASSERT_TRUE(AssignWriters(SaveStrategy::FullyParallel(), world, comm).has_value());
    std::map<int, std::set<std::string>> expected{{0, {"a"}}, {1, {"b"}}, {2, {}}, {3, {}}};
    EXPECT_EQ(Writes(world), expected[comm.rank()]) << "rank " << comm.rank();

    auto dp = DpGroup(comm);  // only {0, 2} holds a main replica: it writes both
    Node along_dp = Replicated(comm.rank());
    std::optional<ShardDistribution> dist =
        AssignWriters(SaveStrategy::FullyParallel(dp.get()), along_dp, comm);
    ASSERT_TRUE(dist.has_value());
    expected = {{0, {"a"}}, {1, {}}, {2, {"b"}}, {3, {}}};
    EXPECT_EQ(Writes(along_dp), expected[comm.rank()]) << "rank " << comm.rank();

    CountingCommunicator counting(*dp);  // a reused plan's distribution: no collective
    Node reused = Replicated(comm.rank());
    AssignWriters(SaveStrategy::FullyParallel(&counting), reused, comm, &*dist);
    EXPECT_TRUE(counting.calls.empty());
    EXPECT_EQ(Writes(reused), expected[comm.rank()]) << "rank " << comm.rank();
  });
}

// Every rank's value of "a" and "b" after LoadSharded: the rank that read it.
struct Loaded {
  std::vector<std::pair<double, double>> values = std::vector<std::pair<double, double>>(kWorld);
  std::vector<ExchangeStats> stats = std::vector<ExchangeStats>(kWorld);
};

Loaded LoadWith(const std::function<LoadStrategy(Communicator& dp)>& strategy) {
  Loaded loaded;
  RunRanks(kWorld, [&](Communicator& comm) {
    auto dp = DpGroup(comm);
    Node out = LoadSharded(strategy(*dp), Replicated(comm.rank()),
                           FillingRead(comm.rank(), nullptr), comm, &loaded.stats[comm.rank()]);
    loaded.values[comm.rank()] = {out.at("a").as<Tensor>().At(0), out.at("b").as<Tensor>().At(0)};
  });
  return loaded;
}

using Values = std::vector<std::pair<double, double>>;

TEST(LoadShardedTest, PlainReadsEverythingItself) {
  Loaded plain = LoadWith([](Communicator&) { return LoadStrategy{}; });
  EXPECT_EQ(plain.values, (Values{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
  for (const ExchangeStats& s : plain.stats) EXPECT_EQ(s.collectives, 0u);
}

TEST(LoadShardedTest, FullyParallelReadsEachShardOncePerGroupAndBalances) {
  Loaded world = LoadWith([](Communicator&) { return LoadStrategy::FullyParallel(); });
  EXPECT_EQ(world.values, (Values{{0, 1}, {0, 1}, {0, 1}, {0, 1}}));
  Loaded dp = LoadWith([](Communicator& dp) { return LoadStrategy::FullyParallel(&dp); });
  EXPECT_EQ(dp.values, (Values{{0, 2}, {1, 3}, {0, 2}, {1, 3}}));
}

TEST(LoadShardedTest, FullyParallelExchangesWithItsAlgorithm) {
  Loaded broadcast = LoadWith([](Communicator&) { return LoadStrategy::FullyParallel(); });
  Loaded rounds = LoadWith([](Communicator&) {
    return LoadStrategy::FullyParallel(nullptr, ExchangeAlgorithm::kGatherRounds);
  });
  EXPECT_EQ(rounds.values, broadcast.values);
  EXPECT_EQ(broadcast.stats[0].collectives, 2u);  // one broadcast per shard
  EXPECT_EQ(rounds.stats[0].collectives, 1u);     // ranks 0 and 1 read one shard each: one round
}

TEST(LoadShardedTest, TwoStageReadsEachShardByItsLowestHolder) {
  Loaded dp = LoadWith([](Communicator& dp) { return LoadStrategy::TwoStage(&dp); });
  EXPECT_EQ(dp.values, (Values{{0, 0}, {1, 1}, {0, 0}, {1, 1}}));
  for (const ExchangeStats& s : dp.stats) EXPECT_EQ(s.collectives, 2u);
}

TEST(LoadShardedTest, FullyParallelReusesItsCachedDistribution) {
  RunRanks(kWorld, [](Communicator& comm) {
    PlanCache cache;
    CountingCommunicator counting(comm);
    std::vector<int> gathers;
    for (int load = 0; load < 2; ++load) {
      counting.Reset();
      LoadSharded(LoadStrategy::FullyParallel(nullptr, ExchangeAlgorithm::kBroadcast, &cache),
                  Replicated(comm.rank()), FillingRead(comm.rank(), nullptr), counting);
      gathers.push_back(counting.count("AllGather"));
    }
    EXPECT_EQ(cache.hits, 1u);
    EXPECT_EQ(gathers[1], gathers[0] - 1);  // no metadata all-gather
  });
}

}  // namespace
}  // namespace distckpt
