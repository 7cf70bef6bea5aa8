// Async save machinery: bucketing, background writers (files, failures,
// hangs), the calls queue (ordering, agreement, timeouts) and staging reuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "comm/thread_world.h"
#include "io/fault_env.h"
#include "io/testing.h"
#include "strategy/async_queue.h"
#include "strategy/async_writer.h"
#include "strategy/staging.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

WriteItem TensorItem(const std::string& key, size_t elements, size_t offset) {
  WriteItem item;
  item.key = key;
  item.dtype = DType::kU8;
  item.global_shape = {static_cast<int64_t>(elements)};
  item.box = Box{{0}, {static_cast<int64_t>(elements)}};
  item.offset = offset;
  item.length = elements;
  return item;
}

WriteItem ObjectItem(const std::string& key, size_t length, size_t offset) {
  WriteItem item;
  item.is_object = true;
  item.key = key;
  item.unique_key = key + "/shard_0_1";
  item.object_shape = {1};
  item.object_offset = {0};
  item.offset = offset;
  item.length = length;
  return item;
}

TEST(SplitBySizeAndTypeTest, ObjectsRoundRobinTensorsLargestFirstToTheLightestBucket) {
  std::vector<WriteItem> items{TensorItem("a", 10, 0), ObjectItem("o0", 3, 0),
                               TensorItem("b", 50, 0), TensorItem("c", 30, 0),
                               ObjectItem("o1", 3, 0), TensorItem("d", 20, 0),
                               TensorItem("e", 5, 0),  ObjectItem("o2", 3, 0)};
  // b (50) -> 0; c (30) -> 1; d (20) -> 1; a (10) -> 0 (50 vs 50: lower index); e (5) -> 1.
  EXPECT_THAT(SplitBySizeAndType(items, 2),
              ElementsAre(ElementsAre(1, 7, 2, 0), ElementsAre(4, 3, 5, 6)));
  EXPECT_THAT(SplitBySizeAndType(items, 1), ElementsAre(ElementsAre(0, 1, 2, 3, 4, 5, 6, 7)));
}

// Stages `n` items of 100 + i bytes (value i) into one buffer.
std::pair<std::vector<WriteItem>, std::shared_ptr<StagingBuffer>> Staged(int n,
                                                                         size_t bytes = 100) {
  std::vector<WriteItem> items;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    items.push_back(TensorItem("t" + std::to_string(i), bytes + i, total));
    total += bytes + i;
  }
  auto buffer = StagingPool::Unpooled(total);
  for (const WriteItem& item : items)
    std::memset(buffer->data() + item.offset, item.key[1], item.length);
  return {items, buffer};
}

TEST(WriterJobTest, EachWriterWritesItsOwnFileAndTheMetadataCoversEveryItem) {
  ScopedTempDir tmp;
  auto [items, staged] = Staged(5);
  WriterJob job(NativeFormat(), Env::Default(), tmp.path(), 3, items, staged, 3);
  ASSERT_TRUE(job.WaitUntil(Clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(job.writers(), 3);
  CheckpointMetadata md = job.Result();
  EXPECT_EQ(md.tensors.size(), 5u);
  std::set<std::string> files;
  for (const auto& [key, t] : md.tensors) {
    files.insert(t.chunks.at(0).file);
    EXPECT_EQ(t.chunks.at(0).writer_rank, 3);
  }
  EXPECT_EQ(files, (std::set<std::string>{"__3_0.bin", "__3_1.bin", "__3_2.bin"}));
  for (const std::string& f : files) EXPECT_TRUE(fs::exists(fs::path(tmp.path()) / f)) << f;
  EXPECT_EQ(job.bytes_written(), 100u + 101 + 102 + 103 + 104);
  EXPECT_EQ(job.Pending(), "");
}

TEST(WriterJobTest, MoreWritersThanItemsWriteNoEmptyFiles) {
  ScopedTempDir tmp;
  auto [items, staged] = Staged(2);
  WriterJob job(NativeFormat(), Env::Default(), tmp.path(), 0, items, staged, 8);
  ASSERT_TRUE(job.WaitUntil(Clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(job.writers(), 2);
  WriterJob empty(NativeFormat(), Env::Default(), tmp.path(), 1, {}, StagingPool::Unpooled(0), 4);
  ASSERT_TRUE(empty.WaitUntil(Clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(empty.writers(), 1);
  EXPECT_TRUE(empty.Result().tensors.empty());
  EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "__1_0.bin"));
}

TEST(WriterJobTest, AFailingWriterIsReportedWithRankWriterAndFile) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  env.FailPathsContaining("__2_1.bin");
  auto [items, staged] = Staged(4);
  WriterJob job(NativeFormat(), &env, tmp.path(), 2, items, staged, 2);
  ASSERT_TRUE(job.WaitUntil(Clock::now() + std::chrono::seconds(30)));
  EXPECT_THAT([&] { job.Result(); }, ThrowsError(ErrorKind::kIo, "async writer 1 of rank 2"));
  EXPECT_THAT([&] { job.Result(); }, ThrowsError(ErrorKind::kIo, "__2_1.bin"));
}

// Items large enough to go to the file at once hang the writer at the
// first; small ones are held back (DataFileWriter) and hang it in its last
// writes, after every item was handed over.
TEST(WriterJobTest, AHungWriterIsPendingUntilItMovesOn) {
  for (size_t bytes : {size_t{5000}, size_t{100}}) {
    ScopedTempDir tmp;
    GatedEnv env;
    auto [items, staged] = Staged(3, bytes);
    WriterJob job(NativeFormat(), &env, tmp.path(), 5, items, staged, 1);
    EXPECT_FALSE(job.WaitUntil(Clock::now() + std::chrono::milliseconds(50)));
    EXPECT_FALSE(job.Done());
    EXPECT_THAT(job.Pending(),
                HasSubstr(bytes > 4096 ? "writer 0 of rank 5: 0 of 3 items written"
                                       : "writer 0 of rank 5: 3 of 3 items written"));
    EXPECT_EQ(job.Pending().ends_with("flushing and syncing"), bytes < 4096);
    EXPECT_THAT([&] { job.Result(); },
                ThrowsError(ErrorKind::kInvalidArgument, "have not finished"));
    env.Open();
    EXPECT_TRUE(job.WaitUntil(Clock::now() + std::chrono::seconds(30)));
    EXPECT_EQ(job.Result().tensors.size(), 3u);
  }
}

TEST(WriterJobTest, DestroyingAJobWithAHungWriterDoesNotBlock) {
  ScopedTempDir tmp;
  auto env = std::make_unique<GatedEnv>();
  {
    auto [items, staged] = Staged(1);
    WriterJob job(NativeFormat(), env.get(), tmp.path(), 0, items, staged, 1);
    env->WaitUntilAnAppendWaits();
  }  // detaches the hung writer
  env->Open();
  env->WaitUntilNoFileOpen();  // the detached writer is done with `env`
}

// Background work that finishes when told to.
class ManualWork : public AsyncWork {
 public:
  bool WaitUntil(Clock::time_point deadline) override {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return done_; });
  }
  std::string Pending() const override { return "manual work"; }
  void Finish() {
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

TEST(AsyncCallsQueueTest, FinalizesInOrderOnlyWhenDoneOnEveryRank) {
  RunRanks(4, [](Communicator& comm) {
    AsyncCallsQueue queue(comm);
    auto first = std::make_shared<ManualWork>(), second = std::make_shared<ManualWork>();
    std::vector<std::string> log;
    AsyncRequest a(first), b(second);
    a.AddFinalize(
        [&] { log.push_back("a" + std::to_string(comm.AllReduceOne(1, ReduceOp::kSum))); });
    b.AddFinalize([&] { log.push_back("b"); });
    EXPECT_EQ(queue.Schedule(a), 1);
    EXPECT_EQ(queue.Schedule(b), 2);
    second->Finish();
    if (comm.rank() != 2) first->Finish();
    EXPECT_TRUE(queue.MaybeFinalize(false).empty());  // rank 2 is not done with the first
    if (comm.rank() == 2) first->Finish();
    EXPECT_THAT(queue.MaybeFinalize(false), ElementsAre(1, 2));
    EXPECT_THAT(log, ElementsAre("a4", "b"));
    EXPECT_EQ(queue.pending(), 0u);
  });
}

TEST(AsyncCallsQueueTest, FrozenRequestsRefuseFinalizeFunctionsAndAbortDropsCalls) {
  RunRanks(1, [](Communicator& comm) {
    AsyncCallsQueue queue(comm);
    AsyncRequest request(std::make_shared<ManualWork>());
    queue.Schedule(request);  // freezes the queued copy
    request.Freeze();
    EXPECT_THAT([&] { request.AddFinalize([] {}); },
                ThrowsError(ErrorKind::kInvalidArgument,
                            "Cannot add finalization functions to a frozen AsyncRequest"));
    queue.Close(/*abort=*/true);
    EXPECT_EQ(queue.pending(), 0u);
  });
}

TEST(AsyncCallsQueueTest, BlockingFinalizeTimesOutOnEveryRankInsteadOfHanging) {
  auto stuck = std::make_shared<ManualWork>();
  auto errors = ErrorMessagesOnRanks(3, [&](Communicator& comm) {
    AsyncCallsQueue queue(comm, std::chrono::milliseconds(100));
    auto work = comm.rank() == 1 ? stuck : std::make_shared<ManualWork>();
    if (comm.rank() != 1) static_cast<ManualWork&>(*work).Finish();
    bool finalized = false;
    AsyncRequest request(work);
    request.AddFinalize([&] { finalized = true; });
    queue.Schedule(request);
    try {
      queue.MaybeFinalize(true);
    } catch (const CheckpointError&) {
      EXPECT_FALSE(finalized);
      EXPECT_EQ(queue.pending(), 0u);  // the failed call is dropped
      throw;
    }
  });
  EXPECT_THAT(errors,
              Each(HasSubstr("rank 1: async call 1 did not finish within 0.1 s: manual work")));
}

TEST(AsyncCallsQueueTest, UnmatchedCallsAreAnError) {
  auto errors = ErrorMessagesOnRanks(2, [&](Communicator& comm) {
    AsyncCallsQueue queue(comm);
    auto done = std::make_shared<ManualWork>();
    done->Finish();
    if (comm.rank() == 0) {  // call 1 dropped without a collective: rank 0 is one call ahead
      queue.Schedule(AsyncRequest(done));
      queue.Close(/*abort=*/true);
    }
    queue.Schedule(AsyncRequest(done));
    queue.MaybeFinalize(true);
  });
  EXPECT_THAT(errors, Each(HasSubstr("Unmatched async calls")));
}

TEST(StagingPoolTest, ReleasedBuffersAreReused) {
  StagingPool pool;
  std::byte* first;
  {
    auto a = pool.Acquire(1000);
    first = a->data();
    EXPECT_GE(a->capacity(), 1000u);
    auto b = pool.Acquire(10);  // a is in use: a second allocation
  }
  auto c = pool.Acquire(900);  // smallest free buffer that fits: the 1000-byte one
  EXPECT_EQ(c->data(), first);
  EXPECT_EQ(pool.allocations(), 2u);
  EXPECT_EQ(pool.reuses(), 1u);
  EXPECT_EQ(c->pinned(), StagingBuffer::PinnedMemoryAvailable());
  auto outlives = pool.Acquire(5000);
  EXPECT_EQ(pool.allocations(), 3u);
}

}  // namespace
}  // namespace distckpt
