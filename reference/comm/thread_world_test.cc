// Tests of the in-process backend: every collective with 1..8 ranks, splits,
// aborts and misuse (which must fail, never hang), AgreeOnOutcome, and
// independent worlds running at the same time.
#include "comm/thread_world.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>

#include "comm/testing.h"
#include "core/error.h"

namespace distckpt {
namespace {

constexpr size_t kLarge = 3 << 20;  // bytes per rank in the large-payload cases

// Runs `body` on its own thread. A body still running after `limit` means the
// backend deadlocked: the binary dies saying so instead of hanging.
void WithDeadline(const std::function<void()>& body,
                  std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([body, done] {
    try {
      body();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (finished.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "deadlock: test body still running after %lld s\n",
                 static_cast<long long>(limit.count()));
    std::abort();
  }
  finished.get();
}

void ExpectError(const std::exception_ptr& error, ErrorKind kind, const std::string& message) {
  ASSERT_TRUE(error) << "expected: " << message;
  try {
    std::rethrow_exception(error);
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(std::string(e.what()), message);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CheckpointError: " << e.what();
  }
}

class CollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  int ranks() const { return GetParam(); }
  void Run(const std::function<void(Communicator&)>& fn) {
    WithDeadline([&] { RunRanks(ranks(), fn); });
  }
};

TEST_P(CollectivesTest, RanksAndSizes) {
  std::vector<std::atomic<int>> seen(ranks());
  Run([&](Communicator& comm) {
    EXPECT_EQ(comm.size(), ranks());
    ++seen[comm.rank()];
  });
  for (const std::atomic<int>& count : seen) EXPECT_EQ(count.load(), 1);
}

// Every rank of a ThreadWorld is a thread of this process: all of them share
// the machine, also seen from a sub-communicator.
TEST_P(CollectivesTest, RanksOnNodeIsTheWorld) {
  Run([&](Communicator& comm) {
    EXPECT_EQ(comm.ranks_on_node(), ranks());
    std::unique_ptr<Communicator> half = comm.Split(comm.rank() % 2, 0);
    EXPECT_EQ(half->ranks_on_node(), ranks());
  });
}

TEST_P(CollectivesTest, Barrier) {
  std::atomic<int> arrived = 0;
  Run([&](Communicator& comm) {
    ExpectBarrierWorks(comm);
    for (int i = 1; i <= 20; ++i) {
      ++arrived;
      comm.Barrier();
      EXPECT_EQ(arrived.load(), i * ranks());
      comm.Barrier();  // nobody arrives at the next step before all have checked
    }
  });
}

TEST_P(CollectivesTest, Broadcast) {
  Run([](Communicator& comm) {
    for (size_t length : {size_t{0}, size_t{1}, size_t{1000}, kLarge}) {
      ExpectBroadcastWorks(comm, length);
    }
  });
}

TEST_P(CollectivesTest, Gather) {
  Run([](Communicator& comm) {
    for (size_t base : {size_t{0}, size_t{100}, kLarge}) ExpectGatherWorks(comm, base);
  });
}

TEST_P(CollectivesTest, AllGather) {
  Run([](Communicator& comm) {
    for (size_t base : {size_t{0}, size_t{100}, kLarge}) ExpectAllGatherWorks(comm, base);
  });
}

TEST_P(CollectivesTest, AllReduce) {
  Run([](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) ExpectAllReduceWorks(comm, count);
    EXPECT_EQ(comm.AllReduceOne(comm.rank(), ReduceOp::kMax), comm.size() - 1);
  });
}

TEST_P(CollectivesTest, Split) { Run(ExpectSplitWorks); }

TEST_P(CollectivesTest, Subgroup) { Run(ExpectSubgroupWorks); }

TEST_P(CollectivesTest, AgreeOnOutcome) {
  std::vector<int> odd_ranks;
  for (int r = 1; r < ranks(); r += 2) odd_ranks.push_back(r);
  Run([&](Communicator& comm) {
    ExpectAgreeOnOutcomeWorks(comm, {});
    ExpectAgreeOnOutcomeWorks(comm, {comm.size() - 1});
    ExpectAgreeOnOutcomeWorks(comm, odd_ranks);
  });
}

TEST_P(CollectivesTest, RepeatedMixedCollectives) {
  Run([](Communicator& comm) {
    const int n = comm.size();
    for (int i = 0; i < 200; ++i) {
      EXPECT_EQ(comm.AllReduceOne(comm.rank() + i, ReduceOp::kSum), n * (n - 1) / 2 + n * i);
      const std::vector<std::string> all = comm.AllGather(std::to_string(comm.rank() * i));
      for (int r = 0; r < static_cast<int>(all.size()); ++r) {
        EXPECT_EQ(all[r], std::to_string(r * i));
      }
      std::string word = comm.rank() == i % n ? "step " + std::to_string(i) : "";
      comm.Broadcast(word, i % n);
      EXPECT_EQ(word, "step " + std::to_string(i));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(OneToEightRanks, CollectivesTest, ::testing::Range(1, 9));

TEST(ThreadWorldTest, FailureReleasesRanksWaitingInCollective) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(4, [](Communicator& comm) {
      comm.Barrier();
      if (comm.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // others block meanwhile
        Fail(ErrorKind::kIo, "disk full");
      }
      comm.AllGather("payload");
    });
    ASSERT_EQ(outcomes.size(), 4u);
    for (const RankOutcome& outcome : outcomes) {
      EXPECT_EQ(outcome.rank, &outcome - outcomes.data());
      if (outcome.rank == 2) {
        ExpectError(outcome.error, ErrorKind::kIo, "disk full");
      } else {
        ExpectError(outcome.error, ErrorKind::kComm, "rank 2 aborted: disk full");
      }
    }
  });
}

TEST(ThreadWorldTest, FailureReleasesRanksInSubCommunicators) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(6, [](Communicator& comm) {
      std::unique_ptr<Communicator> half = comm.Split(comm.rank() % 2, 0);
      std::unique_ptr<Communicator> pair = half->Split(half->rank() / 2, 0);
      EXPECT_EQ(half->AllReduceOne(1, ReduceOp::kSum), 3);
      if (comm.rank() == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        throw std::logic_error("bad state");
      }
      if (comm.rank() == 1) pair->Barrier();  // nested group, waits for rank 3
      if (comm.rank() == 5) half->AllGather("x");
      comm.Barrier();
    });
    for (const RankOutcome& outcome : outcomes) {
      if (outcome.rank != 3) {
        ExpectError(outcome.error, ErrorKind::kComm, "rank 3 aborted: bad state");
      }
    }
  });
}

TEST(ThreadWorldTest, RunRanksRethrowsTheOriginalFailure) {
  WithDeadline([] {
    // Ranks 0..2 fail with the induced kComm error; rank 3's own error wins.
    try {
      RunRanks(4, [](Communicator& comm) {
        if (comm.rank() == 3) Fail(ErrorKind::kCorruption, "bad checksum");
        comm.Barrier();
      });
      ADD_FAILURE() << "RunRanks did not throw";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
      EXPECT_STREQ(e.what(), "bad checksum");
    }
    // Non-CheckpointError exceptions keep their type.
    EXPECT_THROW(RunRanks(3,
                          [](Communicator& comm) {
                            if (comm.rank() == 1) throw std::out_of_range("index 7");
                            comm.Barrier();
                          }),
                 std::out_of_range);
    // Of two original failures, the lower rank's.
    try {
      RunRanks(3, [](Communicator& comm) {
        if (comm.rank() > 0) Fail(ErrorKind::kIo, "rank {} failed", comm.rank());
      });
      ADD_FAILURE() << "RunRanks did not throw";
    } catch (const CheckpointError& e) {
      EXPECT_STREQ(e.what(), "rank 1 failed");
    }
  });
}

TEST(ThreadWorldTest, CollectivesAfterAbortKeepFailing) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(2, [](Communicator& comm) {
      if (comm.rank() == 0) Fail(ErrorKind::kIo, "gone");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // enters after the abort
      for (int i = 0; i < 2; ++i) {
        try {
          comm.AllReduceOne(1, ReduceOp::kSum);
          ADD_FAILURE() << "collective succeeded in an aborted world";
        } catch (const CheckpointError& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kComm);
          EXPECT_STREQ(e.what(), "rank 0 aborted: gone");
        }
      }
    });
    EXPECT_FALSE(outcomes[1].error);
  });
}

TEST(ThreadWorldTest, RankReturningEarlyFailsTheOthersInsteadOfHanging) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(3, [](Communicator& comm) {
      if (comm.rank() == 1) return;
      comm.Barrier();
    });
    EXPECT_FALSE(outcomes[1].error);
    for (int r : {0, 2}) {
      ExpectError(outcomes[r].error, ErrorKind::kComm,
                  "deadlock: no rank can proceed (rank 0 waits in Barrier, rank 1 returned, "
                  "rank 2 waits in Barrier)");
    }
  });
}

TEST(ThreadWorldTest, CollectivesOfDifferentGroupsInConflictFailInsteadOfHanging) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(3, [](Communicator& comm) {
      std::unique_ptr<Communicator> pair = comm.Subgroup({0, 1});
      if (comm.rank() == 0) comm.Barrier();        // waits for ranks 1 and 2
      if (comm.rank() == 1) pair->AllGather("x");  // waits for rank 0
      if (comm.rank() == 2) comm.Barrier();
    });
    for (const RankOutcome& outcome : outcomes) {
      ExpectError(outcome.error, ErrorKind::kComm,
                  "deadlock: no rank can proceed (rank 0 waits in Barrier, rank 1 waits in "
                  "AllGather, rank 2 waits in Barrier)");
    }
  });
}

TEST(ThreadWorldTest, MismatchedCollectivesFailOnEveryRank) {
  WithDeadline([] {
    const std::vector<RankOutcome> outcomes = RunRanksCollect(2, [](Communicator& comm) {
      std::vector<int64_t> values(3 + comm.rank());
      comm.AllReduce(values, ReduceOp::kSum);
    });
    for (const RankOutcome& outcome : outcomes) {
      ExpectError(outcome.error, ErrorKind::kComm,
                  "collective mismatch: rank 0 called AllReduce(3 values, sum) but rank 1 called "
                  "AllReduce(4 values, sum)");
    }
    const std::vector<RankOutcome> lengths = RunRanksCollect(2, [](Communicator& comm) {
      std::string bytes(4 + comm.rank(), 'x');
      comm.BroadcastBytes(std::as_writable_bytes(std::span(bytes)), 1);
    });
    for (const RankOutcome& outcome : lengths) {
      ExpectError(outcome.error, ErrorKind::kComm,
                  "collective mismatch: rank 0 called BroadcastBytes(4 bytes, root 1) but rank 1 "
                  "called BroadcastBytes(5 bytes, root 1)");
    }
    EXPECT_THROW(RunRanks(2,
                          [](Communicator& comm) {
                            if (comm.rank() == 0) comm.Barrier();
                            if (comm.rank() == 1) comm.AllGather("x");
                          }),
                 CheckpointError);
  });
}

TEST(ThreadWorldTest, RejectsBadArguments) {
  try {
    RunRanks(0, [](Communicator&) {});
    ADD_FAILURE() << "accepted an empty world";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
  WithDeadline([] {
    try {
      RunRanks(2, [](Communicator& comm) {
        std::string bytes;
        comm.Broadcast(bytes, 2);
      });
      ADD_FAILURE() << "accepted root 2 of 2 ranks";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_STREQ(e.what(), "root rank 2 out of range for a communicator of size 2");
    }
  });
}

TEST(ThreadWorldTest, ConcurrentWorldsAreIndependent) {
  WithDeadline([] {
    std::vector<std::future<void>> worlds;
    for (int w = 0; w < 4; ++w) {
      worlds.push_back(std::async(std::launch::async, [w] {
        RunRanks(w + 2, [w](Communicator& comm) {
          for (int i = 0; i < 50; ++i) {
            const int64_t value = 1000 * w + i;
            EXPECT_EQ(comm.AllReduceOne(value, ReduceOp::kSum), comm.size() * value);
            ExpectAllGatherWorks(comm, 64 * w + i);
          }
        });
      }));
    }
    // A world that aborts meanwhile affects no other.
    worlds.push_back(std::async(std::launch::async, [] {
      EXPECT_THROW(RunRanks(3,
                            [](Communicator& comm) {
                              for (int i = 0; i < 20; ++i) comm.Barrier();
                              if (comm.rank() == 0) Fail(ErrorKind::kIo, "world 4 fails");
                              comm.Barrier();
                            }),
                   CheckpointError);
    }));
    for (std::future<void>& world : worlds) world.get();
  });
}

}  // namespace
}  // namespace distckpt
