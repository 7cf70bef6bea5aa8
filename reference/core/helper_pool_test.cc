#include "core/helper_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace distckpt {
namespace {

using std::chrono::seconds;
using std::chrono::steady_clock;

// Waits up to 10 s for `flag`.
bool WaitFor(const std::atomic<bool>& flag) {
  const auto deadline = steady_clock::now() + seconds(10);
  while (!flag && steady_clock::now() < deadline) std::this_thread::yield();
  return flag;
}

TEST(HelperPoolTest, EveryItemIsDoneOnceByTheCallsThatRun) {
  std::vector<std::atomic<int>> done(1000);
  std::atomic<size_t> next{0};
  std::atomic<size_t> max_call{0};
  RunWithHelpers(HelperPoolSize(), [&](size_t call) {
    size_t seen = max_call;
    while (call > seen && !max_call.compare_exchange_weak(seen, call)) {
    }
    for (size_t i = next++; i < done.size(); i = next++) ++done[i];
  });
  for (const auto& d : done) EXPECT_EQ(d, 1);
  EXPECT_LE(max_call, static_cast<size_t>(HelperPoolSize()));
}

TEST(HelperPoolTest, AnIdleHelperJoinsTheCaller) {
  std::atomic<bool> helper_ran{false};
  std::thread::id caller = std::this_thread::get_id(), helper;
  RunWithHelpers(1, [&](size_t call) {
    if (call == 0) {
      EXPECT_TRUE(WaitFor(helper_ran));  // the pool is idle: its thread joins
    } else {
      helper = std::this_thread::get_id();
      helper_ran = true;
    }
  });
  EXPECT_TRUE(helper_ran);
  EXPECT_NE(helper, caller);
}

TEST(HelperPoolTest, HelperThreadsAreReused) {
  std::set<std::thread::id> helpers;
  std::mutex mu;
  for (int i = 0; i < 50; ++i) {
    std::atomic<bool> helper_ran{false};
    RunWithHelpers(1, [&](size_t call) {
      if (call == 0) {
        WaitFor(helper_ran);
        return;
      }
      std::lock_guard lock(mu);
      helpers.insert(std::this_thread::get_id());
      helper_ran = true;
    });
  }
  EXPECT_GE(helpers.size(), 1u);
  EXPECT_LE(helpers.size(), static_cast<size_t>(HelperPoolSize()));
}

TEST(HelperPoolTest, CallsNotStartedWhenTheCallerFinishesAreNotMade) {
  // Keep every pool thread busy, so no helper call of the second job can start.
  const int helpers = HelperPoolSize();
  std::atomic<bool> release{false}, all_busy{false};
  std::atomic<int> busy{0};
  std::thread occupier([&] {
    RunWithHelpers(helpers, [&](size_t call) {
      if (++busy == helpers + 1) all_busy = true;
      // The caller's call waits for its helpers to start, which then hold
      // the pool until released.
      WaitFor(call == 0 ? all_busy : release);
    });
  });
  const bool occupied = WaitFor(all_busy);
  std::atomic<int> calls{0};
  if (occupied) RunWithHelpers(helpers, [&](size_t) { ++calls; });  // returns without waiting
  release = true;
  occupier.join();
  ASSERT_TRUE(occupied);
  EXPECT_EQ(calls, 1);
  // The skipped calls stay skipped once the pool is free again.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls, 1);
}

TEST(HelperPoolTest, TheCallersExceptionPassesThroughAfterTheHelpers) {
  std::atomic<bool> helper_started{false}, helper_returned{false};
  EXPECT_THROW(RunWithHelpers(1,
                              [&](size_t call) {
                                if (call == 0) {
                                  WaitFor(helper_started);
                                  throw std::runtime_error("caller failed");
                                }
                                helper_started = true;
                                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                helper_returned = true;
                              }),
               std::runtime_error);
  EXPECT_TRUE(helper_returned);
}

TEST(HelperPoolTest, ConcurrentCallersShareThePool) {
  std::atomic<int> items{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&] {
      for (int r = 0; r < 100; ++r) {
        std::atomic<int> next{0};
        RunWithHelpers(HelperPoolSize(), [&](size_t) {
          for (int i = next++; i < 10; i = next++) ++items;
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(items, 8 * 100 * 10);
}

}  // namespace
}  // namespace distckpt
