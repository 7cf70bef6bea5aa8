// Local checkpoints with replication over 8 thread ranks (Megatron's
// test_replication.py / test_local.py, docs/megatron-semantics.md §9.2 rows 25, 26, 50): each
// rank dir holds its clique's files, lost files are recovered bit-exact from peers,
// a lost clique is a clear error, only the newest iteration is kept and a
// failed save leaves no partial iteration.
#include "engine/local_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "comm/thread_world.h"
#include "core/error_testing.h"
#include "engine/local_blob.h"
#include "io/checksum.h"
#include "io/fault_env.h"
#include "io/testing.h"
#include "strategy/local_store.h"
#include "strategy/replication.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::Each;
using ::testing::HasSubstr;
using Groups = std::vector<std::vector<int>>;

constexpr int kWorld = 8;

// Rank `rank`'s state at `iteration`: a TP-like shard with values unique to
// (rank, iteration, element), a replicated tensor, an object, common state.
Node State(int rank, int64_t iteration, bool with_data = true) {
  auto values = [&](Shape shape, float base) {
    Tensor t = Tensor::Empty(DType::kF32, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<float>()[i] = base + 1000.0f * iteration + 0.25f * i;
    return with_data ? t : Tensor();
  };
  ShardedTensor w =
      ShardedTensor::FromRankOffsetsMeta("w", DType::kF32, {3, 5}, {{0, rank, kWorld}});
  w.data = values({3, 5}, 100.0f * rank);
  ShardedTensor b = ShardedTensor::FromRankOffsetsMeta("b", DType::kF32, {4}, {}, {rank});
  b.data = values({4}, 7);
  Dict d{
      {"w", Node(w)},
      {"b", Node(b)},
      {"rng", Node(ShardedObject{
                  "rng", nlohmann::json{{"seed", rank * 10 + iteration}}, {kWorld}, {rank}, {0}})},
      {"iteration", Node(nlohmann::json(iteration))}};
  return Node(std::move(d));
}

void ExpectState(const Node& loaded, int rank, int64_t iteration) {
  Node want = State(rank, iteration);
  EXPECT_TRUE(loaded.at("w").as<Tensor>().Equals(want.at("w").as<ShardedTensor>().data))
      << "rank " << rank;
  EXPECT_TRUE(loaded.at("b").as<Tensor>().Equals(want.at("b").as<ShardedTensor>().data))
      << "rank " << rank;
  EXPECT_EQ(loaded.at("rng").as<nlohmann::json>(), want.at("rng").as<ShardedObject>().data);
  EXPECT_EQ(loaded.at("iteration").as<nlohmann::json>(), iteration);
}

std::set<std::string> FilesOf(const std::string& root, int rank) {
  std::set<std::string> names;
  if (!fs::exists(fs::path(root) / std::to_string(rank))) return names;
  for (const auto& entry : fs::directory_iterator(fs::path(root) / std::to_string(rank))) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

void SaveAll(const std::string& root, const Groups& groups, int64_t iteration) {
  RunRanks(kWorld, [&](Communicator& comm) {
    SaveLocal(State(comm.rank(), iteration), iteration, comm, {root, nullptr, groups});
  });
}

// Loads on every rank and expects iteration `iteration`'s state.
void ExpectLoadsIteration(const std::string& root, const Groups& groups, int64_t iteration) {
  RunRanks(kWorld, [&](Communicator& comm) {
    LocalLoadResult r = LoadLocal(State(comm.rank(), 0, false), comm, {root, nullptr, groups});
    EXPECT_EQ(r.iteration, iteration);
    ExpectState(r.state_dict, comm.rank(), iteration);
  });
}

class ReplicatedLocalTest : public ::testing::TestWithParam<Groups> {};

// test_repl_save_and_load: each rank dir holds its group's files; wipe ranks 6, 3, 4; load.
TEST_P(ReplicatedLocalTest, WipedRanksRecoverTheirFilesFromPeersBitExact) {
  ScopedTempDir tmp;
  const Groups& groups = GetParam();
  SaveAll(tmp.path(), groups, 1);
  for (int rank = 0; rank < kWorld; ++rank) {
    std::set<std::string> expected{"iter_0000001_commit.json"};
    for (int member : groups[GroupIndexOf(groups, kWorld, rank)])
      expected.insert(LocalFileName({1, member}));
    EXPECT_EQ(FilesOf(tmp.path(), rank), expected) << "rank " << rank;
  }
  for (int rank : {6, 3, 4}) fs::remove_all(fs::path(tmp.path()) / std::to_string(rank));
  RunRanks(kWorld, [&](Communicator& comm) {
    LocalLoadResult r =
        LoadLocal(State(comm.rank(), 0, false), comm, {tmp.path(), nullptr, groups});
    EXPECT_EQ(r.iteration, 1);
    EXPECT_EQ(r.recovered_from_peer, comm.rank() == 6 || comm.rank() == 3 || comm.rank() == 4);
    ExpectState(r.state_dict, comm.rank(), 1);
  });
}

INSTANTIATE_TEST_SUITE_P(MegatronGroups, ReplicatedLocalTest,
                         ::testing::Values(Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
                                           Groups{{2, 6, 7}, {3, 1}, {5}, {0, 4}},
                                           Cliques(kWorld, {4, 2})));

TEST(LocalCheckpointTest, ALostCliqueIsNamedOnEveryRank) {
  ScopedTempDir tmp;
  Groups groups = Cliques(kWorld, {4, 2});  // {0, 4}, {1, 5}, {2, 6}, {3, 7}
  SaveAll(tmp.path(), groups, 5);
  for (int rank : {1, 5}) fs::remove_all(fs::path(tmp.path()) / std::to_string(rank));
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LoadLocal(State(comm.rank(), 0, false), comm, {tmp.path(), nullptr, groups});
  });
  EXPECT_THAT(errors, Each(HasSubstr("no replicas available for rank 1 (iteration 5)")));
  EXPECT_THAT(errors, Each(HasSubstr("iter_0000005_1_local.bin")));
}

TEST(LocalCheckpointTest, WithoutReplicationAWipedRankCannotLoad) {
  ScopedTempDir tmp;
  SaveAll(tmp.path(), {}, 1);
  EXPECT_EQ(FilesOf(tmp.path(), 2),
            (std::set<std::string>{"iter_0000001_2_local.bin", "iter_0000001_commit.json"}));
  fs::remove_all(fs::path(tmp.path()) / "2");
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LoadLocal(State(comm.rank(), 0, false), comm, {tmp.path(), nullptr, {}});
  });
  EXPECT_THAT(errors, Each(HasSubstr("no replicas available for rank 2")));
}

TEST(LocalCheckpointTest, KeepsOnlyTheNewestIteration) {
  ScopedTempDir tmp;
  Groups groups = Cliques(kWorld, {1, 2});
  SaveAll(tmp.path(), groups, 1);
  SaveAll(tmp.path(), groups, 2);
  EXPECT_EQ(FilesOf(tmp.path(), 3),
            (std::set<std::string>{LocalFileName({2, 2}), LocalFileName({2, 3}),
                                   "iter_0000002_commit.json"}));
  ExpectLoadsIteration(tmp.path(), groups, 2);
}

// Issue 15 defect 4: every CLI save was iteration 1, and a failed save
// removed "the new iteration" -- the previous good one -- on every rank.
TEST(LocalCheckpointTest, IterationsAreNeverReusedSoAFailedSaveKeepsThePrevious) {
  ScopedTempDir tmp;
  Groups groups = Cliques(kWorld, {1, 2});
  SaveAll(tmp.path(), groups, 1);
  FaultInjectionEnv failing(Env::Default());
  failing.FailPathsContaining("_local");
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LocalOptions options{tmp.path(), comm.rank() == 1 ? &failing : nullptr, groups};
    SaveLocal(State(comm.rank(), 1), 1, comm, options);  // the same iteration again
  });
  EXPECT_THAT(errors, Each(HasSubstr("iteration 1 is not newer than iteration 1")));
  ExpectLoadsIteration(tmp.path(), groups, 1);
  errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LocalOptions options{tmp.path(), comm.rank() == 1 ? &failing : nullptr, groups};
    SaveLocal(State(comm.rank(), 2), kNextLocalIteration, comm, options);  // the CLI's way
  });
  EXPECT_THAT(errors, Each(HasSubstr("rank 1: ")));
  ExpectLoadsIteration(tmp.path(), groups, 1);
  RunRanks(kWorld, [&](Communicator& comm) {
    SaveLocal(State(comm.rank(), 2), kNextLocalIteration, comm, {tmp.path(), nullptr, groups});
  });
  ExpectLoadsIteration(tmp.path(), groups, 2);
}

// A save killed after every rank renamed its files but before the commit
// records: its files are not a checkpoint; the previous one loads.
TEST(LocalCheckpointTest, FilesWithoutACommitRecordAreNotLoaded) {
  ScopedTempDir tmp;
  SaveAll(tmp.path(), {}, 1);
  for (int rank = 0; rank < kWorld; ++rank) {
    const std::string dir = tmp.path() + "/" + std::to_string(rank);
    fs::copy_file(dir + "/" + LocalFileName({1, rank}), dir + "/" + LocalFileName({2, rank}));
  }
  ExpectLoadsIteration(tmp.path(), {}, 1);
}

// Issue 15 defect 4: a save by a smaller world left the larger world's
// files on the other ranks, and a load by the larger world read the mix.
TEST(LocalCheckpointTest, ASmallerWorldsSaveIsNotMixedWithALargerWorldsFiles) {
  ScopedTempDir tmp;
  SaveAll(tmp.path(), {}, 1);
  RunRanks(kWorld / 2, [&](Communicator& comm) {
    SaveLocal(State(comm.rank(), 2), kNextLocalIteration, comm, {tmp.path(), nullptr, {}});
  });
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LoadLocal(State(comm.rank(), 0, false), comm, {tmp.path(), nullptr, {}});
  });
  EXPECT_THAT(errors, Each(HasSubstr("(iteration 2) was saved by 4 ranks; this load runs 8")));
}

TEST(LocalCheckpointTest, AFailedSaveLeavesNoPartialIterationAndThePreviousOneLoads) {
  ScopedTempDir tmp;
  Groups groups = Cliques(kWorld, {1, 2});
  SaveAll(tmp.path(), groups, 1);
  FaultInjectionEnv failing(Env::Default());
  failing.FailPathsContaining("iter_0000002_0_local");  // rank 1 holds rank 0's copy
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    LocalOptions options{tmp.path(), comm.rank() == 1 ? &failing : nullptr, groups};
    SaveLocal(State(comm.rank(), 2), 2, comm, options);
  });
  EXPECT_THAT(errors, Each(HasSubstr("rank 1: ")));
  for (int rank = 0; rank < kWorld; ++rank) {
    for (const std::string& name : FilesOf(tmp.path(), rank)) {
      EXPECT_EQ(name.find("iter_0000002"), std::string::npos)
          << "rank " << rank << " kept " << name;
    }
  }
  ExpectLoadsIteration(tmp.path(), groups, 1);
}

TEST(LocalCheckpointTest, ARequestForAShardThatWasNotSavedNamesKeyAndRank) {
  ScopedTempDir tmp;
  SaveAll(tmp.path(), {}, 1);
  auto errors = ErrorMessagesOnRanks(kWorld, [&](Communicator& comm) {
    Node request = State(comm.rank(), 0, false);
    request["extra"] =
        Node(ShardedTensor::FromRankOffsetsMeta("extra", DType::kF32, {2}, {}, {comm.rank()}));
    LoadLocal(request, comm, {tmp.path(), nullptr, {}});
  });
  EXPECT_THAT(errors,
              Each(HasSubstr("extra (global offset (0,)) is not in the local checkpoint of rank")));
}

// A rank's local file with a damaged header (issue 39): offsets past the
// end (no wrap-around), a length short of the tensor's bytes, fields of
// another type; each a CheckpointError naming the file's rank, never a read
// outside the blob.
TEST(LocalCheckpointTest, ADamagedHeaderIsRefused) {
  const std::string blob = SerializeLocalState(State(0, 1), 1, 0);
  const size_t json_at = blob.find('{');
  ASSERT_NE(json_at, std::string::npos);
  uint64_t length = 0;
  std::memcpy(&length, blob.data() + json_at - 8, 8);  // little-endian hosts
  const nlohmann::json header = nlohmann::json::parse(blob.substr(json_at, length));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json h = header;
    edit(h);
    const std::string text = h.dump();
    std::string out = blob.substr(0, json_at - 8);
    const uint64_t n = text.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    return out + text + blob.substr(json_at + length);
  };
  EXPECT_NO_THROW(LoadLocalState(with([](nlohmann::json&) {}), State(0, 1, false), 1, 0, nullptr));
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> cases = {
      {"truncated", [](nlohmann::json& h) { h["tensors"][0]["offset"] = ~uint64_t{0} - 7; }},
      {"truncated", [](nlohmann::json& h) { h["tensors"][0]["length"] = ~uint64_t{0}; }},
      {"bytes, not the",
       [&](nlohmann::json& h) {
         auto& t = h["tensors"][0];
         t["length"] = 4;  // with the checksum of those 4 bytes
         const std::string data = blob.substr(json_at + length + t["offset"].get<uint64_t>(), 4);
         t["checksum"] = ChecksumToHex(Checksum(std::as_bytes(std::span(data.data(), 4))));
       }},
      {"damaged header", [](nlohmann::json& h) { h["tensors"][0]["offset"] = "0"; }},
      {"damaged header", [](nlohmann::json& h) { h.erase("objects"); }},
      {"damaged header", [](nlohmann::json& h) { h["version"] = "1"; }},
      // Floats past every integer type (a literal past 2^64 parses as one):
      // get<T>() of them was undefined behaviour (UBSan), now refused by name.
      {"damaged header: version: 1e+30 is not an integer",
       [](nlohmann::json& h) { h["version"] = 1e30; }},
      {"damaged header: rank: 1.5 is not an integer", [](nlohmann::json& h) { h["rank"] = 1.5; }},
      {"damaged header: offset: 1e+30 is not an integer",
       [](nlohmann::json& h) { h["tensors"][0]["offset"] = 1e30; }},
      {"damaged header: length: -1 is not an integer of unsigned",
       [](nlohmann::json& h) { h["tensors"][0]["length"] = -1; }},
      {"damaged header: local_shape: 1e+30 is not an integer",
       [](nlohmann::json& h) { h["tensors"][0]["meta"]["local_shape"][0] = 1e30; }},
      {"damaged header: replica_id: true is not an integer",
       [](nlohmann::json& h) { h["tensors"][0]["meta"]["replica_id"][0] = true; }},
      {"damaged header: prepend_axis_num: 4294967296 is not an integer of signed 32",
       [](nlohmann::json& h) { h["tensors"][0]["meta"]["prepend_axis_num"] = int64_t{1} << 32; }},
  };
  for (const auto& [message, edit] : cases) {
    EXPECT_THAT([&] { LoadLocalState(with(edit), State(0, 1, false), 1, 0, nullptr); },
                ThrowsError(ErrorKind::kCorruption, message))
        << message;
  }
}

TEST(LocalCheckpointTest, NothingSavedIsAClearError) {
  ScopedTempDir tmp;
  auto errors = ErrorMessagesOnRanks(2, [&](Communicator& comm) {
    LoadLocal(Node(), comm, {tmp.path(), nullptr, {}});
  });
  EXPECT_THAT(errors, Each(HasSubstr("no local checkpoint under")));
}

}  // namespace
}  // namespace distckpt
