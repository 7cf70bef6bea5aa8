// Local checkpoint files and replication cliques (docs/megatron-semantics.md §4.8;
// Megatron's test_local.py::test_filename_to_id, §9.2 row 22).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/fault_env.h"
#include "io/testing.h"
#include "strategy/local_store.h"
#include "strategy/replication.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

TEST(LocalStoreTest, FileNamesRoundTrip) {
  EXPECT_EQ(LocalFileName({123, 4}), "iter_0000123_4_local.bin");
  EXPECT_EQ(ParseLocalFileName("iter_0000123_4_local.bin"), (LocalFileId{123, 4}));
  EXPECT_FALSE(ParseLocalFileName("iter_0000123_4_local.bin.dirty"));
  EXPECT_FALSE(ParseLocalFileName("iter_x_4_local.bin"));
  EXPECT_FALSE(ParseLocalFileName("iter_0000123_local.bin"));
  EXPECT_FALSE(ParseLocalFileName("metadata.json"));
}

TEST(LocalStoreTest, WritesListsAndRemovesIterations) {
  ScopedTempDir tmp;
  LocalStore store(Env::Default(), tmp.path(), 3);
  EXPECT_TRUE(store.List().empty());  // no directory yet
  std::string blob = "bytes";
  for (LocalFileId id : {LocalFileId{1, 3}, LocalFileId{1, 2}, LocalFileId{2, 3}}) {
    store.Write(id, std::as_bytes(std::span(blob)));
  }
  EXPECT_EQ(store.dir(), tmp.path() + "/3");
  EXPECT_THAT(store.List(), ElementsAre(LocalFileId{1, 2}, LocalFileId{1, 3}, LocalFileId{2, 3}));
  EXPECT_EQ(store.Read({1, 2}), "bytes");
  std::ofstream(store.dir() + "/iter_0000002_5_local.bin.dirty") << "crashed";
  store.RemoveOlderThan(2);
  EXPECT_THAT(store.List(), ElementsAre(LocalFileId{2, 3}));
  store.RemoveIteration(2);
  EXPECT_TRUE(store.List().empty());
  EXPECT_TRUE(fs::is_empty(store.dir()));  // the dirty file went too
}

TEST(LocalStoreTest, AFailedWriteLeavesNoCommittedFile) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  env.FailRenames(true);
  LocalStore store(&env, tmp.path(), 0);
  std::string blob = "bytes";
  EXPECT_THAT(
      [&] {
        store.Write({1, 0}, std::as_bytes(std::span(blob)));
      },
      ThrowsError(ErrorKind::kIo));
  EXPECT_TRUE(store.List().empty());
}

TEST(ReplicationTest, CliquesJumpAcrossNodes) {
  // NVRx's example: W=32, J=8, F=2 -> 0-8, 1-9, ..., 7-15, 16-24, ..., 23-31.
  std::vector<std::vector<int>> cliques = Cliques(32, {8, 2});
  ASSERT_EQ(cliques.size(), 16u);
  EXPECT_THAT(cliques[0], ElementsAre(0, 8));
  EXPECT_THAT(cliques[7], ElementsAre(7, 15));
  EXPECT_THAT(cliques[8], ElementsAre(16, 24));
  EXPECT_THAT(cliques[15], ElementsAre(23, 31));
  EXPECT_THAT(Cliques(8, {1, 4}), ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(4, 5, 6, 7)));
  EXPECT_THAT(Cliques(4, {1, 1}),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(
      [] {
        Cliques(12, {4, 2});
      },
      ThrowsError(ErrorKind::kInvalidArgument, "divisible by jump * factor"));
}

TEST(ReplicationTest, ParsesJumpAndFactor) {
  ReplicationParams p = ParseReplicationParams("8,2");
  EXPECT_EQ(p.jump, 8);
  EXPECT_EQ(p.factor, 2);
  for (const char* bad : {"8", "8,", "0,2", "a,2", "8,2,1", "-1,2"}) {
    EXPECT_THAT([&] { ParseReplicationParams(bad); },
                ThrowsError(ErrorKind::kInvalidArgument, "expected J,F"))
        << bad;
  }
}

TEST(ReplicationTest, ExplicitGroupsMustPartitionTheRanks) {
  std::vector<std::vector<int>> groups{{2, 6, 7}, {3, 1}, {5}, {0, 4}};
  EXPECT_EQ(GroupIndexOf(groups, 8, 6), 0);
  EXPECT_EQ(GroupIndexOf(groups, 8, 0), 3);
  EXPECT_THAT(
      [&] {
        GroupIndexOf({{0, 1}, {1, 2}}, 3, 0);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "rank 1 is in two"));
  EXPECT_THAT(
      [&] {
        GroupIndexOf({{0, 1}}, 3, 0);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "rank 2 is in no"));
  EXPECT_THAT(
      [&] {
        GroupIndexOf({{0, 9}}, 3, 0);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "rank 9 of a world of 3"));
}

}  // namespace
}  // namespace distckpt
