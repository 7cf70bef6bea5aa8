#include "io/crash_env.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "io/forwarding_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

TEST(ForwardingEnvTest, ForwardsEveryCallAndLetsSubclassesOverride) {
  ScopedTempDir tmp;
  CountingEnv env(Env::Default());
  const std::string dir = JoinPath(tmp.path(), "d");
  env.CreateDirs(dir);
  WriteFileAtomic(&env, JoinPath(dir, "f"), std::string("hello"));
  EXPECT_EQ(env.opened, 1);
  EXPECT_TRUE(env.IsDirectory(dir));
  EXPECT_EQ(env.FileSize(JoinPath(dir, "f")), 5u);
  EXPECT_EQ(ReadFileToString(&env, JoinPath(dir, "f")), "hello");
  env.RenameFile(JoinPath(dir, "f"), JoinPath(dir, "g"));
  EXPECT_EQ(env.ListDir(dir), std::vector<std::string>{"g"});
  env.RemoveFile(JoinPath(dir, "g"));
  EXPECT_FALSE(env.FileExists(JoinPath(dir, "g")));
  env.RemoveAll(dir);
  EXPECT_FALSE(Env::Default()->FileExists(dir));
}

struct Fixture {
  ScopedTempDir tmp;
  std::string dir = JoinPath(tmp.path(), "data");
  CrashTestEnv env{Env::Default(), JoinPath(tmp.path(), "trash")};
  Fixture() { Env::Default()->CreateDirs(dir); }
  std::string Path(const std::string& name) const { return JoinPath(dir, name); }
};

TEST(CrashTestEnvTest, NumbersEveryMutatingOperationOfAnAtomicWrite) {
  Fixture f;
  WriteFileAtomic(&f.env, f.Path("m"), std::string("v1"));
  EXPECT_EQ(ReadFileToString(&f.env, f.Path("m")), "v1");  // reads are not numbered
  std::vector<std::string> log = f.env.operation_log();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0], "0 create " + f.Path("m.tmp"));
  EXPECT_EQ(log[1], "1 write " + f.Path("m.tmp"));
  EXPECT_EQ(log[2], "2 fsync " + f.Path("m.tmp"));
  EXPECT_EQ(log[3], "3 rename " + f.Path("m.tmp") + " -> " + f.Path("m"));
  EXPECT_EQ(log[4], "4 fsync-dir " + f.dir);
  EXPECT_EQ(f.env.operations(), 5);
}

TEST(CrashTestEnvTest, CrashFailsTheOperationAndEveryLaterCall) {
  Fixture f;
  f.env.CrashAtOperation(1);
  std::unique_ptr<WritableFile> file = f.env.NewWritableFile(f.Path("a"));
  EXPECT_THAT([&] { file->Append(Bytes("abcd")); },
              ThrowsError(ErrorKind::kIo, "simulated crash at operation 1: write " + f.Path("a")));
  EXPECT_TRUE(f.env.crashed());
  EXPECT_THAT([&] { f.env.FileExists(f.Path("a")); }, ThrowsError(ErrorKind::kIo, "simulated"));
  EXPECT_THAT([&] { f.env.RemoveFile(f.Path("a")); }, ThrowsError(ErrorKind::kIo, "simulated"));
  file->Close();
  // A torn write: half of the bytes reached the file, and a crash keeps them.
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("a")), "ab");
  f.env.Reset();
  EXPECT_FALSE(f.env.crashed());
  EXPECT_TRUE(f.env.FileExists(f.Path("a")));
}

TEST(CrashTestEnvTest, PowerLossDropsUnsyncedDataAndDirectoryEntries) {
  Fixture f;
  WriteFileAtomic(Env::Default(), f.Path("old"), std::string("durable"));
  // Synced data in a synced directory entry survives; later appends do not.
  auto kept = f.env.NewWritableFile(f.Path("kept"));
  kept->Append(Bytes("12345"));
  kept->Sync();
  f.env.SyncDir(f.dir);
  kept->Append(Bytes("678"));
  // Synced data whose directory entry was never synced is lost.
  auto unlisted = f.env.NewWritableFile(f.Path("unlisted"));
  unlisted->Append(Bytes("x"));
  unlisted->Sync();
  // Unsynced removal, rename over an existing file and mkdir are undone.
  WriteFileAtomic(Env::Default(), f.Path("target"), std::string("before"));
  WriteFileAtomic(Env::Default(), f.Path("source"), std::string("after"));
  f.env.RenameFile(f.Path("source"), f.Path("target"));
  f.env.RemoveFile(f.Path("old"));
  f.env.CreateDirs(f.Path("sub/deeper"));
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("target")), "after");
  kept->Close();
  unlisted->Close();

  f.env.DropUnsyncedData();
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("kept")), "12345");
  EXPECT_FALSE(Env::Default()->FileExists(f.Path("unlisted")));
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("old")), "durable");
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("target")), "before");
  EXPECT_EQ(ReadFileToString(Env::Default(), f.Path("source")), "after");
  EXPECT_FALSE(Env::Default()->FileExists(f.Path("sub")));
}

TEST(CrashTestEnvTest, SyncedDirectoryChangesSurvivePowerLoss) {
  Fixture f;
  f.env.CreateDirs(f.Path("sub"));
  f.env.SyncDir(f.dir);
  WriteFileAtomic(&f.env, JoinPath(f.Path("sub"), "m"), std::string("v"));
  f.env.RemoveAll(f.Path("sub"));  // not synced: comes back with its file
  f.env.DropUnsyncedData();
  EXPECT_EQ(ReadFileToString(Env::Default(), JoinPath(f.Path("sub"), "m")), "v");
}

// Every crash point of an atomic overwrite, with and without a power loss:
// the file holds the old or the new contents, never a mix, never nothing.
TEST(CrashTestEnvTest, AtomicWriteSurvivesACrashAtEveryOperation) {
  for (bool power_loss : {false, true}) {
    for (int64_t n = 0; n < 5; ++n) {
      Fixture f;
      WriteFileAtomic(Env::Default(), f.Path("m"), std::string("old contents"));
      f.env.CrashAtOperation(n);
      EXPECT_THROW(WriteFileAtomic(&f.env, f.Path("m"), std::string("new contents!")),
                   CheckpointError);
      if (power_loss) f.env.DropUnsyncedData();
      std::string got = ReadFileToString(Env::Default(), f.Path("m"));
      EXPECT_TRUE(got == "old contents" || got == "new contents!")
          << "crash at " << n << (power_loss ? " + power loss" : "") << ": " << got;
      if (power_loss && n < 4) {
        EXPECT_EQ(got, "old contents") << n;
      }
    }
  }
}

}  // namespace
}  // namespace distckpt
