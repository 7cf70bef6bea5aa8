// SaveAsync over thread ranks and real files (Megatron's test_async_save.py,
// docs/megatron-semantics.md §9.2 rows 1-2): async and sync checkpoints are identical, a
// writer failure on one rank fails every rank and commits nothing, the state may change as
// soon as SaveAsync returns, staging buffers are reused, a hung writer times
// out.
#include "engine/save_async.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "comm/thread_world.h"
#include "engine/checkpoint_diff.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/dcp/dcp_format.h"
#include "io/fault_env.h"
#include "io/testing.h"
#include "strategy/staging.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::Each;
using ::testing::HasSubstr;

// TestAsyncSave's state (8 ranks there), with values: keyA (2, 4)
// replicated with replica = rank, keyB (3, 5, 7) replicated with replica =
// world - 1 - rank, each rank's 2-element slice of keyC, an object per rank;
// and keyE (2 * world, 0), which has no elements.
Node AsyncState(const Communicator& comm, float bias = 0) {
  const int rank = comm.rank(), world = comm.size();
  auto filled = [&](Shape shape, float base) {
    Tensor t = Tensor::Empty(DType::kF32, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<float>()[i] = base + bias + static_cast<float>(i);
    return t;
  };
  Dict d;
  d["keyA"] = Node(ShardedTensor::FromRankOffsets("keyA", filled({2, 4}, 0), {}, {rank}));
  d["keyB"] =
      Node(ShardedTensor::FromRankOffsets("keyB", filled({3, 5, 7}, 100), {}, {world - 1 - rank}));
  d["keyC"] = Node(
      ShardedTensor::FromRankOffsets("keyC", filled({2}, 1000 + 2 * rank), {{0, rank, world}}));
  d["keyE"] = Node(  // no elements: each rank's (2, 0) rows
      ShardedTensor::FromRankOffsets("keyE", Tensor::Empty(DType::kF32, {2, 0}),
                                     {{0, rank, world}}));
  d["obj"] = Node(ShardedObject{"obj", nlohmann::json{{"rank", rank}}, {world}, {rank}, {0}});
  d["step"] = Node(nlohmann::json(7));
  return Node(std::move(d));
}

// Runs SaveAsync through a queue and finalizes it (blocking).
std::shared_ptr<SaveSummary> SaveThroughQueue(const Node& state, const std::string& dir,
                                              Communicator& comm, const SaveOptions& options = {}) {
  AsyncCallsQueue queue(comm);
  AsyncSave save = SaveAsync(state, dir, comm, options);
  queue.Schedule(save.request);
  queue.MaybeFinalize(true);
  return save.summary;
}

TEST(SaveAsyncTest, AsyncIsEquivalentToSync) {
  ScopedTempDir tmp;
  const std::string sync_dir = tmp.path() + "/sync", async_dir = tmp.path() + "/async";
  RunRanks(8, [&](Communicator& comm) {
    SaveOptions options;
    options.strategy.writers = 3;
    auto summary = SaveThroughQueue(AsyncState(comm), async_dir, comm, options);
    Save(AsyncState(comm), sync_dir, comm);
    EXPECT_EQ(summary->bytes_written, summary->bytes_staged);
    EXPECT_LE(summary->blocking_seconds, summary->seconds);
  });
  CheckpointDiff diff = DiffCheckpoints(sync_dir, async_dir);
  EXPECT_TRUE(diff.identical()) << ::testing::PrintToString(diff.mismatches);
  EXPECT_EQ(diff.tensors_compared, 4u);
  EXPECT_EQ(diff.objects_compared, 8u);
  // Rank 0 wrote keyA (and keyB? no: its replica is 7) over several files.
  EXPECT_TRUE(fs::exists(fs::path(async_dir) / "__0_1.bin"));
  EXPECT_FALSE(fs::exists(fs::path(sync_dir) / "__0_1.bin"));
}

TEST(SaveAsyncTest, WriterFailureOnOneRankFailsEveryRankAndCommitsNothing) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ckpt";
  RunRanks(8, [&](Communicator& comm) { Save(AsyncState(comm), dir, comm); });  // the previous one
  FaultInjectionEnv failing(Env::Default());
  failing.FailPathsContaining("__2_0.bin");
  auto errors = ErrorMessagesOnRanks(8, [&](Communicator& comm) {
    SaveOptions options;
    options.overwrite = true;
    options.strategy.writers = 8;
    if (comm.rank() == 2) options.env = &failing;
    SaveThroughQueue(AsyncState(comm, 0.5f), dir, comm, options);
  });
  EXPECT_THAT(errors, Each(HasSubstr("rank 2: async writer 0 of rank 2")));
  EXPECT_THAT(errors, Each(HasSubstr("__2_0.bin")));
  EXPECT_FALSE(fs::exists(dir + ".staging/metadata.json"));  // no stray committed directory
  // The previous checkpoint still loads, with its values.
  RunRanks(8, [&](Communicator& comm) {
    Node request = AsyncState(comm, -1);
    LoadResult r = Load(request, dir, comm);
    EXPECT_EQ(r.state_dict.at("keyB").as<Tensor>().At(1), 101);
  });
}

// DCP through async save: several writer threads per rank (one
// __<rank>_<i>.distcp each), an overwrite that fails on one rank keeps the
// previous checkpoint, and one that succeeds replaces it (staging swap).
TEST(SaveAsyncTest, DcpWithSeveralWritersOverwritesAtomically) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ckpt";
  SaveOptions options;
  options.format = &DcpFormat();
  options.strategy.writers = 3;
  RunRanks(4, [&](Communicator& comm) { SaveThroughQueue(AsyncState(comm), dir, comm, options); });
  int streams = 0;  // data files beyond each rank's first: the writer threads' own
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    streams += name.ends_with(".distcp") && !name.ends_with("_0.distcp");
  }
  EXPECT_GT(streams, 0);
  FaultInjectionEnv failing(Env::Default());
  failing.FailPathsContaining("__1_0.distcp");
  auto errors = ErrorMessagesOnRanks(4, [&](Communicator& comm) {
    SaveOptions o = options;
    o.overwrite = true;
    if (comm.rank() == 1) o.env = &failing;
    SaveThroughQueue(AsyncState(comm, 0.5f), dir, comm, o);
  });
  EXPECT_THAT(errors, Each(HasSubstr("__1_0.distcp")));
  auto key_b = [&](Communicator& comm) {
    return Load(AsyncState(comm, -1), dir, comm).state_dict.at("keyB").as<Tensor>().At(1);
  };
  RunRanks(4, [&](Communicator& comm) { EXPECT_EQ(key_b(comm), 101); });  // the previous one
  RunRanks(4, [&](Communicator& comm) {
    SaveOptions o = options;
    o.overwrite = true;
    SaveThroughQueue(AsyncState(comm, 0.5f), dir, comm, o);
  });
  RunRanks(4, [&](Communicator& comm) { EXPECT_EQ(key_b(comm), 101.5); });
  EXPECT_FALSE(fs::exists(dir + ".staging"));
  EXPECT_FALSE(fs::exists(dir + ".old"));
}

// "dcp" keeps the common state as Megatron-Core 0.20 does: the object
// common_state/shard_0_1 in rank 0's data file, no common.pt (sync and async
// alike); "dcp-common-pt" writes the older common.pt. Both read back the same
// common state, and a strict load sees no unexpected common_state key.
TEST(SaveAsyncTest, DcpKeepsTheCommonStateInRankZerosDataFile) {
  ScopedTempDir tmp;
  for (const Format* format : {&DcpFormat(), &DcpFormatWithCommonPt()}) {
    for (bool async : {false, true}) {
      const std::string dir = fmt::format("{}/{}-{}", tmp.path(), format->name(), async);
      SaveOptions options;
      options.format = format;
      RunRanks(4, [&](Communicator& comm) {
        if (async) {
          SaveThroughQueue(AsyncState(comm), dir, comm, options);
        } else {
          Save(AsyncState(comm), dir, comm, options);
        }
      });
      const bool object = format == &DcpFormat();
      EXPECT_EQ(fs::exists(dir + "/common.pt"), !object) << dir;
      auto reader = DcpFormat().OpenReader(Env::Default(), dir);
      EXPECT_EQ(reader->metadata().common.at("step"), 7) << dir;
      EXPECT_EQ(reader->metadata().objects.size(), 4u) << dir;  // "obj" of each rank only
      RunRanks(4, [&](Communicator& comm) {
        LoadOptions load;
        load.strict = StrictHandling::kRaiseAll;
        LoadResult r = Load(AsyncState(comm, -1), dir, comm, load);
        EXPECT_EQ(r.state_dict.at("step").as<nlohmann::json>(), 7);
        EXPECT_EQ(r.state_dict.at("keyB").as<Tensor>().At(1), 101);
      });
    }
  }
}

TEST(SaveAsyncTest, MutatingTheStateAfterSaveAsyncReturnsDoesNotChangeWhatIsWritten) {
  ScopedTempDir tmp;
  RunRanks(2, [&](Communicator& comm) {
    Node state = AsyncState(comm);
    AsyncCallsQueue queue(comm);
    AsyncSave save = SaveAsync(state, tmp.path(), comm);
    queue.Schedule(save.request);
    for (const char* key : {"keyA", "keyB", "keyC"}) {  // the trainer's next step
      Tensor t = state.at(key).as<ShardedTensor>().data;
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = -1;
    }
    queue.MaybeFinalize(true);
    LoadResult r = Load(AsyncState(comm, 42), tmp.path(), comm);
    EXPECT_EQ(r.state_dict.at("keyA").as<Tensor>().At(3), 3);
    EXPECT_EQ(r.state_dict.at("keyC").as<Tensor>().At(1), 1001 + 2 * comm.rank());
  });
}

TEST(SaveAsyncTest, RepeatedSavesReuseTheStagingBuffer) {
  ScopedTempDir tmp;
  RunRanks(4, [&](Communicator& comm) {
    StagingPool pool;
    SaveOptions options;
    options.strategy.staging = &pool;
    AsyncCallsQueue queue(comm);
    for (int step = 0; step < 3; ++step) {
      AsyncSave save =
          SaveAsync(AsyncState(comm, step), tmp.path() + "/" + std::to_string(step), comm, options);
      queue.Schedule(save.request);
      queue.MaybeFinalize(true);
    }
    EXPECT_EQ(pool.allocations(), 1u);
    EXPECT_EQ(pool.reuses(), 2u);
  });
}

TEST(SaveAsyncTest, AHungWriterTimesOutOnEveryRankAndCommitsNothing) {
  ScopedTempDir tmp;
  GatedEnv hung;
  std::vector<std::optional<AsyncSave>> saves(4);
  auto errors = ErrorMessagesOnRanks(4, [&](Communicator& comm) {
    SaveOptions options;
    if (comm.rank() == 1) options.env = &hung;
    AsyncCallsQueue queue(comm, std::chrono::milliseconds(200));
    AsyncSave& save =
        saves[comm.rank()].emplace(SaveAsync(AsyncState(comm), tmp.path(), comm, options));
    queue.Schedule(save.request);
    EXPECT_TRUE(queue.MaybeFinalize(false).empty());  // not done everywhere yet
    queue.MaybeFinalize(true);
  });
  EXPECT_THAT(
      errors,
      Each(HasSubstr("rank 1: async call 1 did not finish within 0.2 s: writer 0 of rank 1")));
  EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "metadata.json"));
  hung.Open();  // the writer moves on and ends before `hung` goes
  EXPECT_TRUE(saves[1]->request.work().WaitUntil(std::chrono::steady_clock::now() +
                                                 std::chrono::seconds(30)));
}

TEST(SaveAsyncTest, FullyParallelAsyncSaveMatchesAPlainOne) {
  ScopedTempDir tmp;
  RunRanks(8, [&](Communicator& comm) {
    SaveOptions options;
    options.strategy = SaveStrategy::FullyParallel();
    options.strategy.writers = 2;
    auto summary = SaveThroughQueue(AsyncState(comm), tmp.path() + "/fp", comm, options);
    Save(AsyncState(comm), tmp.path() + "/plain", comm);
    // Every rank writes its keyC slice (8 B) and object (10 B); then the
    // greedy gives keyB (420 B) to rank 0 and keyA (32 B) to rank 1.
    std::map<int, uint64_t> expected{{0, 420 + 18}, {1, 32 + 18}, {7, 18}};
    if (expected.contains(comm.rank())) {
      EXPECT_EQ(summary->bytes_written, expected[comm.rank()]);
    }
  });
  EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/fp", tmp.path() + "/plain").identical());
}

TEST(SaveAsyncTest, ZeroWritersIsRefused) {
  RunRanks(1, [&](Communicator& comm) {
    SaveOptions options;
    options.strategy.writers = 0;
    EXPECT_THAT([&] { SaveAsync(AsyncState(comm), "/nonexistent", comm, options); },
                ThrowsError(ErrorKind::kInvalidArgument, "at least one writer"));
  });
}

}  // namespace
}  // namespace distckpt
