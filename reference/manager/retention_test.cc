#include "manager/retention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(Retention, KeepAllByDefault) {
  EXPECT_THAT(SupersededIterations({}, {10, 20, 30}, 30), IsEmpty());
}

TEST(Retention, KeepLast) {
  EXPECT_THAT(SupersededIterations({2, 0}, {10, 20, 30}, 30), ElementsAre(10));
  EXPECT_THAT(SupersededIterations({1, 0}, {10, 20, 30}, 30), ElementsAre(10, 20));
  // Newer than the committed one: not superseded (a crashed later attempt, an earlier run).
  EXPECT_THAT(SupersededIterations({1, 0}, {10, 20, 30, 40}, 20), ElementsAre(10));
  // The committed iteration is always kept, even when the list misses it.
  EXPECT_THAT(SupersededIterations({1, 0}, {10}, 20), ElementsAre(10));
}

TEST(Retention, RetainIntervalLikeMegatron) {
  // keep_last 0 with an interval: the newest and the multiples stay.
  EXPECT_THAT(SupersededIterations({0, 100}, {50, 100, 150, 200, 250}, 250), ElementsAre(50, 150));
  EXPECT_THAT(SupersededIterations({2, 100}, {50, 100, 150, 200, 250, 300}, 300),
              ElementsAre(50, 150));
}

TEST(Retention, NegativeIsRefused) {
  EXPECT_THAT(
      [] {
        SupersededIterations({-1, 0}, {}, 0);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "keep_last"));
}

}  // namespace
}  // namespace distckpt
