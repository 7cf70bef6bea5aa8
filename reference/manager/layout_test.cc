#include "manager/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "io/testing.h"
#include "manager/tracker.h"

namespace distckpt {
namespace {

TEST(Layout, IterationDirNames) {
  EXPECT_EQ(IterationDirName(CheckpointLayout::kMegatron, 100), "iter_0000100");
  EXPECT_EQ(IterationDirName(CheckpointLayout::kMegatron, 123456789), "iter_123456789");
  EXPECT_EQ(IterationDirName(CheckpointLayout::kVerl, 100), "global_step_100");
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kMegatron, "iter_0000100"), 100);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kVerl, "global_step_7"), 7);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kMegatron, "iter_100"), std::nullopt);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kMegatron, "iter_00001x0"), std::nullopt);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kVerl, "global_step_007"), std::nullopt);
  // A minus sign (fuzz/regressions/manager_files/negative-iteration: was a
  // CheckpointError out of a parse that returns nullopt for what is no iteration).
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kMegatron, "iter_-1000006"), std::nullopt);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kVerl, "global_step_-7"), std::nullopt);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kVerl, "iter_0000100"), std::nullopt);
  EXPECT_EQ(ParseIterationDirName(CheckpointLayout::kMegatron, "release"), std::nullopt);
  EXPECT_THAT([] { ParseCheckpointLayout("nemo"); },
              ThrowsError(ErrorKind::kInvalidArgument, "'nemo'"));
}

TEST(Tracker, RoundTripAndRelease) {
  ScopedTempDir dir;
  Env* env = Env::Default();
  EXPECT_EQ(ReadTracker(env, dir.path()), std::nullopt);
  WriteTracker(env, dir.path(), {100, false});
  EXPECT_EQ(ReadFileToString(env, TrackerPath(dir.path())), "100\n");
  EXPECT_EQ(ReadTracker(env, dir.path()), (Tracker{100, false}));
  WriteTracker(env, dir.path(), {0, true});
  EXPECT_EQ(ReadTracker(env, dir.path()), (Tracker{0, true}));
  EXPECT_FALSE(env->FileExists(TrackerPath(dir.path()) + ".tmp"));
}

TEST(Tracker, GarbageIsCorruptionNamingTheFile) {
  EXPECT_EQ(ParseTracker("42\n", "t"), (Tracker{42, false}));
  EXPECT_EQ(ParseTracker("release", "t"), (Tracker{0, true}));
  EXPECT_THAT([] { ParseTracker("", "/r/latest"); },
              ThrowsError(ErrorKind::kCorruption, "/r/latest"));
  EXPECT_THAT([] { ParseTracker("4 2", "t"); }, ThrowsError(ErrorKind::kCorruption));
  EXPECT_THAT([] { ParseTracker("-1", "t"); }, ThrowsError(ErrorKind::kCorruption));
  EXPECT_THAT([] { ParseTracker("12abc", "t"); }, ThrowsError(ErrorKind::kCorruption, "12abc"));
}

// Issue 39: Megatron reads int(f.read().strip()); a NUL or control byte is
// shown escaped, not cutting the message short.
TEST(Tracker, WhitespaceAroundAsMegatronAndControlBytesShown) {
  EXPECT_EQ(ParseTracker(" 7\n", "t"), (Tracker{7, false}));
  EXPECT_EQ(ParseTracker("\t\n release \r\n", "t"), (Tracker{0, true}));
  EXPECT_THAT([] { ParseTracker(std::string("2\0junk\n", 7), "/r/latest"); },
              ThrowsError(ErrorKind::kCorruption, "found '2\\x00junk' (7 bytes)"));
  EXPECT_THAT([] { ParseTracker("   ", "t"); }, ThrowsError(ErrorKind::kCorruption));
}

}  // namespace
}  // namespace distckpt
