// Saves over a committed checkpoint that fail for the disk's reasons: a full
// file system (a real small tmpfs: ENOSPC), injected EIO on one rank's data
// file (io/fault_env.h) and a read-only file system. Each must fail with an
// error naming the file and the reason, leave the previous checkpoint
// loading bit-exact, and leave no temporary file behind once the next save
// has run. The tmpfs tests mount, so they need root (skipped otherwise).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>

#include "comm/thread_world.h"
#include "format/format.h"
#include "harness/run/runner.h"
#include "io/fault_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

constexpr char kTopology[] = "tp=2";

Scenario DiskScenario(int seed, int rows) {
  return Scenario::FromJson(
      {{"name", "disk"},
       {"seed", seed},
       {"tensors",
        {{{"key", "w"}, {"shape", {rows, 256}}, {"dtype", "f32"}, {"shard", {{"0", "tp"}}}},
         {{"key", "b"}, {"shape", {256}}, {"dtype", "f32"}}}},
       {"objects", {{{"key", "iteration"}}}},
       {"topologies", {kTopology}}},
      "disk");
}

class DiskFaultsTest : public testing::TestWithParam<std::string> {
 protected:
  StepReport Save(const Scenario& s, const std::string& dir, Env* env = nullptr) {
    StepReport report;
    StepOptions step;
    step.env = env;
    step.overwrite = true;
    RunRanks(2, [&](Communicator& comm) {
      StepReport r = SaveStep(s, nullptr, kTopology, dir, comm, &FormatByName(GetParam()), step);
      if (comm.rank() == 0) report = r;
    });
    return report;
  }
  StepReport Load(const Scenario& s, const std::string& dir) {
    StepReport report;
    RunRanks(2, [&](Communicator& comm) {
      StepReport r = LoadStep(s, nullptr, kTopology, kTopology, dir, comm,
                              StrictHandling::kAssumeOkUnexpected, VerifyPolicy::kAlways);
      if (comm.rank() == 0) report = r;
    });
    return report;
  }
  // Every name under `root` (recursive), for the "nothing left behind" checks.
  static std::vector<std::string> Tree(const std::string& root) {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      names.push_back(fs::relative(e.path(), root).string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // The failed save's leftovers go with the next save; the previous
  // checkpoint loads bit-exact meanwhile.
  void ExpectPreviousIntactAndNextSaveCleans(const std::string& root, const std::string& dir,
                                             const std::vector<std::string>& before) {
    StepReport old_load = Load(previous_, dir);
    EXPECT_TRUE(old_load.ok) << old_load.error;
    StepReport again = Save(next_small_, dir);
    ASSERT_TRUE(again.ok) << again.error;
    StepReport new_load = Load(next_small_, dir);
    EXPECT_TRUE(new_load.ok) << new_load.error;
    EXPECT_EQ(Tree(root), before) << "files left behind";
  }

  Scenario previous_ = DiskScenario(1, 64), next_small_ = DiskScenario(3, 64);
};

// A tmpfs of `size` mounted for the test's lifetime (root only).
class ScopedTmpfs {
 public:
  ScopedTmpfs(const std::string& path, const std::string& size) : path_(path) {
    fs::create_directories(path);
    mounted_ = ::mount("tmpfs", path.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~ScopedTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  bool RemountReadOnly() {
    return ::mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }
  bool RemountWritable() {
    return ::mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT, nullptr) == 0;
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

TEST_P(DiskFaultsTest, FullFileSystemKeepsThePreviousCheckpoint) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  ScopedTempDir tmp;
  const std::string root = JoinPath(tmp.path(), "mnt");
  ScopedTmpfs tmpfs(root, "600k");
  if (!tmpfs.mounted()) GTEST_SKIP() << "mount -t tmpfs refused";
  const std::string dir = JoinPath(root, "ckpt");
  ASSERT_TRUE(Save(previous_, dir).ok);  // 64 KiB of values
  const std::vector<std::string> before = Tree(root);
  StepReport full = Save(DiskScenario(2, 1024), dir);  // 1 MiB: does not fit
  ASSERT_FALSE(full.ok);
  EXPECT_NE(full.error.find("No space left on device"), std::string::npos) << full.error;
  EXPECT_NE(full.error.find(root), std::string::npos) << "names no file: " << full.error;
  ExpectPreviousIntactAndNextSaveCleans(root, dir, before);
}

TEST_P(DiskFaultsTest, InjectedEioOnOneRanksFileKeepsThePreviousCheckpoint) {
  ScopedTempDir tmp;
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  ASSERT_TRUE(Save(previous_, dir).ok);
  const std::vector<std::string> before = Tree(tmp.path());
  FaultInjectionEnv env(Env::Default());
  env.FailPathsContaining(GetParam() == "native" ? "_1_" : "__1_");  // rank 1's data file
  StepReport failed = Save(DiskScenario(2, 64), dir, &env);
  ASSERT_FALSE(failed.ok);
  EXPECT_NE(failed.error.find("Input/output error"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find(tmp.path()), std::string::npos) << "names no file: " << failed.error;
  ExpectPreviousIntactAndNextSaveCleans(tmp.path(), dir, before);
}

TEST_P(DiskFaultsTest, ReadOnlyFileSystemFailsNamingTheFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs (root ignores chmod)";
  ScopedTempDir tmp;
  const std::string root = JoinPath(tmp.path(), "mnt");
  ScopedTmpfs tmpfs(root, "4m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "mount -t tmpfs refused";
  const std::string dir = JoinPath(root, "ckpt");
  ASSERT_TRUE(Save(previous_, dir).ok);
  const std::vector<std::string> before = Tree(root);
  ASSERT_TRUE(tmpfs.RemountReadOnly());
  StepReport failed = Save(DiskScenario(2, 64), dir);
  ASSERT_FALSE(failed.ok);
  EXPECT_NE(failed.error.find("Read-only file system"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find(root), std::string::npos) << "names no file: " << failed.error;
  EXPECT_EQ(Tree(root), before);  // nothing could be written
  StepReport old_load = Load(previous_, dir);
  EXPECT_TRUE(old_load.ok) << old_load.error;
  ASSERT_TRUE(tmpfs.RemountWritable());
  ExpectPreviousIntactAndNextSaveCleans(root, dir, before);
}

INSTANTIATE_TEST_SUITE_P(Formats, DiskFaultsTest, testing::Values("native", "dcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace distckpt
