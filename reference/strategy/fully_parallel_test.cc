// Fully parallel save and load over 8 thread ranks with a fake storage read
// (Megatron's test_fully_parallel.py with MockLoadStrategy, docs/megatron-semantics.md §9.2
// rows 11-15): who reads what, what each rank ends up with, how many exchanges run, the
// extra memory they take, objects, failures and the cached distribution.
#include "strategy/fully_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "core/error.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

constexpr int kWorld = 8;

Node AsDict(const std::vector<ShardedTensor>& shards) {
  Dict d;
  for (const ShardedTensor& t : shards) d["sd_" + t.key] = Node(t);
  return Node(std::move(d));
}

// DP groups of TP2: ranks with equal tp, ordered by rank.
std::unique_ptr<Communicator> DpGroup(Communicator& comm) {
  return comm.Split(comm.rank() % 2, comm.rank());
}

// The global rank that reads `key` for `rank` in Megatron's load
// distribution (test_load_distribution, §4.2 worked example).
int Loader(const std::string& key, int rank, bool along_dp) {
  const int tp = rank % 2;
  if (key == "keyB") return rank;
  if (!along_dp) {
    std::map<std::string, int> world{{"keyD", 4}, {"keyC", 5}, {"keyE", 6}};
    if (key == "key_TP_repl1") return tp;
    if (key == "key_TP_repl2") return 2 + tp;
    return world.at(key);
  }
  // Group rank g of DP group tp is global rank tp + 2 g.
  std::map<std::string, int> tp0{
      {"keyD", 0}, {"keyC", 1}, {"keyE", 2}, {"key_TP_repl1", 3}, {"key_TP_repl2", 3}};
  std::map<std::string, int> tp1{
      {"key_TP_repl1", 0}, {"key_TP_repl2", 1}, {"keyD", 2}, {"keyC", 3}, {"keyE", 0}};
  return tp + 2 * (tp == 0 ? tp0 : tp1).at(key);
}

class MegatronLoadTest : public ::testing::TestWithParam<std::tuple<bool, ExchangeAlgorithm>> {};

TEST_P(MegatronLoadTest, ReadsItsShareAndReceivesTheRest) {
  const auto [along_dp, algorithm] = GetParam();
  RunRanks(kWorld, [&](Communicator& comm) {
    auto dp = DpGroup(comm);
    Communicator& group = along_dp ? *dp : comm;
    std::set<std::string> read_keys;
    Node out = FullyParallelLoad(AsDict(MegatronFullyParallelShards(comm.rank())),
                                 FillingRead(comm.rank(), &read_keys), comm, group, algorithm);
    std::set<std::string> expected_reads;
    for (const ShardedTensor& t : MegatronFullyParallelShards(comm.rank())) {
      const int loader = Loader(t.key, comm.rank(), along_dp);
      if (loader == comm.rank()) expected_reads.insert(t.key);
      const Tensor& got = out.at("sd_" + t.key).as<Tensor>();
      ASSERT_EQ(got.numel(), Volume(t.local_shape)) << t.key;
      EXPECT_EQ(got.At(0), loader) << t.key << " on rank " << comm.rank();
      EXPECT_EQ(got.At(got.numel() - 1), loader) << t.key << " on rank " << comm.rank();
    }
    EXPECT_EQ(read_keys, expected_reads) << "rank " << comm.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(AlongDpAndAlgorithm, MegatronLoadTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(ExchangeAlgorithm::kBroadcast,
                                                              ExchangeAlgorithm::kGatherRounds)));

ShardedTensor Replicated(const std::string& key, int64_t n, int rank) {
  return ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, {n}, {}, {rank});
}

// test_only_necessary_exchanges_performed_during_load.
TEST(FullyParallelLoadTest, BroadcastsOnlyShardsSeveralRanksNeed) {
  RunRanks(kWorld, [&](Communicator& comm) {
    const int r = comm.rank();
    ShardedTensor unique =
        ShardedTensor::FromRankOffsetsMeta("unique", DType::kF32, {4}, {{0, r, kWorld}});
    std::vector<std::pair<std::vector<ShardedTensor>, uint64_t>> cases{
        {{Replicated("needed_by_all", 4, r)}, 1},
        {{Replicated("needed_by_all_A", 4, r), Replicated("needed_by_all_B", 4, r)}, 2},
        {{Replicated("needed_by_all", 4, r), unique}, 1}};
    for (const auto& [shards, broadcasts] : cases) {
      ExchangeStats stats;
      FullyParallelLoad(AsDict(shards), FillingRead(r, nullptr), comm, comm,
                        ExchangeAlgorithm::kBroadcast, nullptr, &stats);
      EXPECT_EQ(stats.collectives, broadcasts) << shards.size() << " tensors";
    }
  });
}

// test_memory_usage: 10 replicated shards over 8 ranks; broadcast holds one
// shard at a time, gather_rounds a round of them.
TEST(FullyParallelLoadTest, BroadcastNeedsOneShardOfExtraMemory) {
  constexpr int64_t kElements = 16384;
  constexpr uint64_t kShardBytes = kElements * 4;
  for (ExchangeAlgorithm algorithm :
       {ExchangeAlgorithm::kBroadcast, ExchangeAlgorithm::kGatherRounds}) {
    RunRanks(kWorld, [&](Communicator& comm) {
      std::vector<ShardedTensor> shards;
      for (int i = 0; i < 10; ++i)
        shards.push_back(Replicated("ten_" + std::to_string(i), kElements, comm.rank()));
      ExchangeStats stats;
      Node out = FullyParallelLoad(AsDict(shards), FillingRead(comm.rank(), nullptr), comm, comm,
                                   algorithm, nullptr, &stats);
      // Ranks 0 and 1 read two shards, the others one.
      EXPECT_EQ(stats.bytes_received, (comm.rank() <= 1 ? 8 : 9) * kShardBytes);
      if (algorithm == ExchangeAlgorithm::kBroadcast) {
        EXPECT_LE(stats.peak_buffer_bytes, kShardBytes + 2);
        EXPECT_EQ(stats.collectives, 10u);
      } else {
        EXPECT_GE(stats.peak_buffer_bytes, 8 * kShardBytes);
        EXPECT_EQ(stats.collectives, 2u);
      }
      EXPECT_EQ(out.at("sd_ten_9").as<Tensor>().At(0), 1);  // shard 9 goes to rank 1
    });
  }
}

ShardedObject Object(const std::string& key, int64_t replica) {
  return ShardedObject{key, nullptr, {1}, {0}, {replica}};
}

// test_broadcast_sharded_objects.
TEST(FullyParallelLoadTest, ObjectsAreReadByTheirMainReplicaAndShared) {
  RunRanks(kWorld, [&](Communicator& comm) {
    Dict request;
    for (int i = 0; i < kWorld; ++i)
      request["Obj_" + std::to_string(i)] =
          Node(Object("Obj_" + std::to_string(i), std::abs(comm.rank() - i)));
    std::set<std::string> read_keys;
    Node out = FullyParallelLoad(Node(request), FillingRead(comm.rank(), &read_keys), comm, comm);
    EXPECT_EQ(read_keys, std::set<std::string>{"Obj_" + std::to_string(comm.rank())});
    for (int i = 0; i < kWorld; ++i) {
      EXPECT_EQ(out.at("Obj_" + std::to_string(i)).as<nlohmann::json>(),
                nlohmann::json::array({i}));
    }
  });
}

TEST(FullyParallelLoadTest, ObjectWithoutMainReplicaIsMissingOnEveryRank) {
  auto errors = ErrorMessagesOnRanks(kWorld, [](Communicator& comm) {
    Dict request{{"obj", Node(Object("obj", 1))}, {"t", Node(Replicated("t", 4, comm.rank()))}};
    FullyParallelLoad(Node(request), FillingRead(0, nullptr), comm, comm);
  });
  EXPECT_THAT(
      errors,
      Each(HasSubstr("Missing object shards after fully parallel loading: {'obj/shard_0_1'}")));
}

TEST(FullyParallelLoadTest, ObjectReadByTwoRanksIsADuplicate) {
  auto errors = ErrorMessagesOnRanks(kWorld, [](Communicator& comm) {
    Dict request{{"obj", Node(Object("obj", comm.rank() <= 1 ? 0 : 1))}};
    FullyParallelLoad(Node(request), FillingRead(0, nullptr), comm, comm);
  });
  EXPECT_THAT(errors,
              Each(HasSubstr("Duplicate shard ids loaded by different ranks: {'obj/shard_0_1'}")));
}

TEST(FullyParallelLoadTest, ReadFailureOnOneRankFailsEveryRank) {
  auto errors = ErrorMessagesOnRanks(kWorld, [](Communicator& comm) {
    ReadShardsFn fill = FillingRead(comm.rank(), nullptr);
    ReadShardsFn read = [&](const Node& sharded) {
      if (comm.rank() == 3) Fail(ErrorKind::kCorruption, "checksum mismatch in __3_0.bin");
      return fill(sharded);
    };
    FullyParallelLoad(AsDict(MegatronFullyParallelShards(comm.rank())), read, comm, comm);
  });
  EXPECT_THAT(errors, Each(HasSubstr("rank 3: checksum mismatch in __3_0.bin")));
}

TEST(FullyParallelLoadTest, CachedDistributionSkipsTheMetadataExchangeUntilALayoutChanges) {
  RunRanks(kWorld, [&](Communicator& comm) {
    CountingCommunicator counting(comm);
    PlanCache cache;
    std::vector<ShardedTensor> shards = MegatronFullyParallelShards(comm.rank());
    auto load = [&](const std::vector<ShardedTensor>& request) {
      counting.Reset();
      Node out = FullyParallelLoad(AsDict(request), FillingRead(comm.rank(), nullptr), counting,
                                   counting, ExchangeAlgorithm::kBroadcast, &cache);
      return out.at("sd_keyD").as<Tensor>().At(0);
    };
    EXPECT_EQ(load(shards), 4);
    const int first = counting.count("AllGather");
    EXPECT_EQ(load(shards), 4);
    EXPECT_EQ(cache.hits, 1u);
    EXPECT_EQ(counting.count("AllGather"), first - 1);                  // no metadata all-gather
    EXPECT_EQ(counting.count("AllReduce"), 1);                          // the one fingerprint check
    if (comm.rank() == 5) shards.push_back(Replicated("extra", 4, 1));  // one rank changes
    load(shards);
    EXPECT_EQ(cache.hits, 1u) << "a changed layout on one rank must recompute on all";
    EXPECT_EQ(counting.count("AllGather"), first);
  });
}

// test_save_distribution[parallelization_along_dp=True] through the
// collective path, then with the distribution of a reused plan: the same
// writers, and no collective.
TEST(FullyParallelSaveTest, RewritesReplicaIdsAlongDp) {
  RunRanks(kWorld, [&](Communicator& comm) {
    auto dp = DpGroup(comm);
    CountingCommunicator counting(*dp);
    std::optional<ShardDistribution> computed;
    for (int save = 0; save < 2; ++save) {
      Node sharded = AsDict(MegatronFullyParallelShards(comm.rank()));
      counting.Reset();
      std::optional<ShardDistribution> applied =
          ApplySavingParallelization(sharded, counting, save == 0 ? nullptr : &*computed);
      ASSERT_TRUE(applied.has_value());
      if (save == 0) {
        EXPECT_EQ(counting.count("AllGather"), 1);  // the group's shard metadata
        computed = applied;
      } else {
        EXPECT_TRUE(counting.calls.empty()) << "a reused distribution needs no collective";
      }
      std::set<std::string> saved;
      for (const ShardedTensor& t : LocalShards(sharded)) {
        if (IsMainReplica(t.replica_id)) saved.insert(t.key);
      }
      std::map<int, std::set<std::string>> expected{{0, {"keyB", "keyD"}},
                                                    {2, {"keyB", "keyC"}},
                                                    {4, {"keyB", "keyE"}},
                                                    {6, {"keyB", "key_TP_repl1", "key_TP_repl2"}},
                                                    {1, {"keyB", "key_TP_repl1"}},
                                                    {3, {"keyB", "key_TP_repl2"}},
                                                    {5, {"keyB"}},
                                                    {7, {"keyB"}}};
      EXPECT_EQ(saved, expected[comm.rank()]) << "rank " << comm.rank() << " save " << save;
    }
  });
}

TEST(FullyParallelSaveTest, GroupOfOneRankLeavesReplicaIdsAlone) {
  RunRanks(2, [&](Communicator& comm) {
    auto alone = comm.Split(comm.rank(), 0);
    Node sharded = AsDict({Replicated("t", 4, comm.rank())});
    EXPECT_FALSE(ApplySavingParallelization(sharded, *alone).has_value());
    EXPECT_EQ(LocalShards(sharded)[0].replica_id, ReplicaId{comm.rank()});
  });
}

TEST(ExchangeTest, UnknownAlgorithmIsRefused) {
  EXPECT_EQ(ParseExchangeAlgorithm("gather_rounds"), ExchangeAlgorithm::kGatherRounds);
  EXPECT_THROW(ParseExchangeAlgorithm("gather_object"), CheckpointError);
}

}  // namespace
}  // namespace distckpt
