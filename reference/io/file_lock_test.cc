#include "io/file_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

// Issue 15 defect 2: two saves into one directory both succeeded.
TEST(FileLockTest, SecondLockFailsNamingTheHolder) {
  ScopedTempDir tmp;
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  {
    std::unique_ptr<FileLock> first = FileLock::LockForSave(Env::Default(), dir + "/");
    EXPECT_EQ(first->path(), dir + ".lock");
    EXPECT_THAT(
        [&] { FileLock::LockForSave(Env::Default(), dir); },
        ThrowsError(ErrorKind::kInvalidArgument, dir + " is being saved by another save (pid " +
                                                     std::to_string(::getpid()) + " on host "));
  }
  // Released with its holder; the file left behind does not block.
  EXPECT_NE(FileLock::LockForSave(Env::Default(), dir), nullptr);
}

TEST(FileLockTest, KilledHolderDoesNotBlock) {
  ScopedTempDir tmp;
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  pid_t child = ::fork();
  if (child == 0) {
    FileLock::LockForSave(Env::Default(), dir).release();  // held until the process dies
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_NE(FileLock::LockForSave(Env::Default(), dir), nullptr);
}

// The writer lock of a training run's root (issue 38): named refusal, probe.
TEST(FileLockTest, LockNamesWhatItGuardsAndHeldByProbes) {
  ScopedTempDir tmp;
  const std::string path = JoinPath(tmp.path(), "writer.lock");
  EXPECT_EQ(FileLock::HeldBy(path), std::nullopt);
  EXPECT_FALSE(Env::Default()->FileExists(path));  // the probe creates nothing
  {
    std::unique_ptr<FileLock> held = FileLock::Lock(path, "root R is held by another writer");
    EXPECT_THAT([&] { FileLock::Lock(path, "root R is held by another writer"); },
                ThrowsError(ErrorKind::kInvalidArgument,
                            "root R is held by another writer (pid " + std::to_string(::getpid())));
    std::optional<std::string> holder = FileLock::HeldBy(path);
    ASSERT_TRUE(holder.has_value());
    EXPECT_EQ(holder->rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u) << *holder;
  }
  EXPECT_EQ(FileLock::HeldBy(path), std::nullopt);  // released, file left behind
  EXPECT_TRUE(Env::Default()->FileExists(path));
  EXPECT_NE(FileLock::Lock(path, "root R is held by another writer"), nullptr);
}

}  // namespace
}  // namespace distckpt
