#include "io/fault_env.h"

#include <gtest/gtest.h>

#include "io/testing.h"

namespace distckpt {
namespace {

TEST(FaultInjectionEnvTest, PassesThroughAndCounts) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string path = JoinPath(tmp.path(), "f");
  std::unique_ptr<WritableFile> file = env.NewWritableFile(path);
  file->Append(Bytes("abcdef"));
  file->Sync();
  file->Close();
  EXPECT_EQ(env.bytes_written(), 6u);
  EXPECT_EQ(ReadFileToString(&env, path), "abcdef");
  EXPECT_EQ(env.bytes_read(), 6u);
  EXPECT_EQ(env.read_calls(), 1u);
  EXPECT_EQ(env.ListDir(tmp.path()), std::vector<std::string>{"f"});
}

TEST(FaultInjectionEnvTest, NoSpaceAfterBudgetWritesWhatFits) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string path = JoinPath(tmp.path(), "f");
  std::unique_ptr<WritableFile> file = env.NewWritableFile(path);
  file->Append(Bytes("1234"));
  env.FailWritesAfter(3);  // counted from now
  file->Append(Bytes("ab"));
  EXPECT_THAT([&] { file->Append(Bytes("cd")); },
              ThrowsError(ErrorKind::kIo, "write " + path + ": No space left on device"));
  EXPECT_THAT([&] { file->Append(Bytes("e")); }, ThrowsError(ErrorKind::kIo, "No space"));
  file->Close();
  EXPECT_EQ(env.bytes_written(), 7u);
  EXPECT_EQ(ReadFileToString(Env::Default(), path), "1234abc");
}

TEST(FaultInjectionEnvTest, FailsMatchingPathsOnly) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string good = JoinPath(tmp.path(), "good");
  const std::string bad = JoinPath(tmp.path(), "bad.bin");
  WriteFileAtomic(&env, good, std::string("x"));
  WriteFileAtomic(&env, bad, std::string("y"));
  env.FailPathsContaining("bad");
  EXPECT_EQ(ReadFileToString(&env, good), "x");
  EXPECT_THAT([&] { env.NewRandomAccessFile(bad); },
              ThrowsError(ErrorKind::kIo, "open " + bad + ": Input/output error"));
  EXPECT_THAT([&] { env.NewWritableFile(bad); }, ThrowsError(ErrorKind::kIo, bad));
  EXPECT_THAT([&] { env.RemoveFile(bad); }, ThrowsError(ErrorKind::kIo, bad));
  EXPECT_THAT([&] { env.RenameFile(good, bad); }, ThrowsError(ErrorKind::kIo, bad));
}

TEST(FaultInjectionEnvTest, FailsReadsOfAnOpenFile) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string path = JoinPath(tmp.path(), "data.bin");
  WriteFileAtomic(&env, path, std::string("abc"));
  std::unique_ptr<RandomAccessFile> in = env.NewRandomAccessFile(path);
  env.FailPathsContaining("data");
  std::vector<std::byte> dst(2);
  EXPECT_THAT([&] { in->Read(0, dst); }, ThrowsError(ErrorKind::kIo, "read " + path));
}

TEST(FaultInjectionEnvTest, FailsRenamesAndSyncs) {
  ScopedTempDir tmp;
  FaultInjectionEnv env(Env::Default());
  const std::string a = JoinPath(tmp.path(), "a");
  const std::string b = JoinPath(tmp.path(), "b");
  std::unique_ptr<WritableFile> file = env.NewWritableFile(a);
  env.FailRenames(true);
  EXPECT_THAT([&] { env.RenameFile(a, b); },
              ThrowsError(ErrorKind::kIo, "rename " + a + " to " + b));
  env.FailRenames(false);
  env.RenameFile(a, b);
  env.FailSyncs(true);
  EXPECT_THAT([&] { file->Sync(); }, ThrowsError(ErrorKind::kIo, "fdatasync " + a));
  EXPECT_THAT([&] { env.SyncDir(tmp.path()); }, ThrowsError(ErrorKind::kIo, tmp.path()));
}

}  // namespace
}  // namespace distckpt
