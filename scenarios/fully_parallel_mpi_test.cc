// Under MPI with 8 ranks (one process each): a fully parallel save of
// scenarios/dp4-replicated.json under tp=2,dp=4 (every weight replicated
// over DP=4) writes each unique shard exactly once, and the busiest rank
// writes within 1.1x of a quarter of its DP group's bytes (and of total/4).
// A fully parallel async save of the same state is identical to the plain
// synchronous one, and the checkpoint loads fully parallel under another
// layout. Rank 0 prints the bytes each rank wrote.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "comm/mpi_test_env.h"
#include "engine/checkpoint_diff.h"
#include "format/format.h"
#include "harness/run/runner.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

constexpr char kTopology[] = "tp=2,dp=4";

// A directory every rank sees, made by rank 0; removed by rank 0 on scope exit.
class SharedTempDir {
 public:
  explicit SharedTempDir(Communicator& comm) : comm_(comm) {
    if (comm.rank() == 0) {
      path_ = (fs::temp_directory_path() / "distckpt-fp-mpi-XXXXXX").string();
      if (::mkdtemp(path_.data()) == nullptr) path_.clear();
    }
    comm.Broadcast(path_, 0);
  }
  ~SharedTempDir() {
    if (comm_.rank() == 0 && !path_.empty()) fs::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  Communicator& comm_;
  std::string path_;
};

void PrintRankBytes(const char* what, const StepReport& report) {
  std::printf("%s: %llu bytes in total\n", what,
              static_cast<unsigned long long>(report.bytes_written));
  for (size_t r = 0; r < report.rank_bytes_written.size(); ++r) {
    std::printf("  rank %zu (tp %zu, dp %zu): %llu bytes\n", r, r % 2, r / 2,
                static_cast<unsigned long long>(report.rank_bytes_written[r]));
  }
  std::fflush(stdout);
}

TEST(FullyParallelMpiTest, DpReplicatedModelIsWrittenOnceAndEvenly) {
  Communicator& world = MpiTestWorld();
  ASSERT_EQ(world.size(), 8);
  SharedTempDir tmp(world);
  ASSERT_FALSE(tmp.path().empty());
  Scenario s = Scenario::FromFile(DISTCKPT_SCENARIO_DIR "/dp4-replicated.json");

  StepReport plain = SaveStep(s, nullptr, kTopology, tmp.path() + "/plain", world);
  StepOptions fully_parallel;
  fully_parallel.save.kind = SaveStrategy::Kind::kFullyParallel;
  StepReport fp =
      SaveStep(s, nullptr, kTopology, tmp.path() + "/fp", world, nullptr, fully_parallel);
  StepOptions async = fully_parallel;
  async.async = true;
  async.save.writers = 2;
  StepReport fp_async =
      SaveStep(s, nullptr, kTopology, tmp.path() + "/fp-async", world, nullptr, async);
  ASSERT_TRUE(plain.ok) << plain.error;
  ASSERT_TRUE(fp.ok) << fp.error;
  ASSERT_TRUE(fp_async.ok) << fp_async.error;
  ASSERT_EQ(fp.rank_bytes_written.size(), 8u);

  if (world.rank() == 0) {
    PrintRankBytes("plain save", plain);
    PrintRankBytes("fully parallel save", fp);
  }
  // Every unique shard exactly once: no stored chunk twice, and the same
  // bytes as the plain save, which writes each main replica once.
  if (world.rank() == 0) {
    Env* env = Env::Default();
    auto reader = NativeFormat().OpenReader(env, tmp.path() + "/fp");
    uint64_t stored = 0;
    for (const auto& [key, tensor] : reader->metadata().tensors) {
      std::set<Shape> offsets;
      for (const StoredChunk& c : tensor.chunks) {
        EXPECT_TRUE(offsets.insert(c.box.offset).second)
            << key << " chunk " << c.box.ToString() << " stored twice";
        stored += c.length;
      }
    }
    uint64_t objects = 0;
    for (const auto& [unique_key, o] : reader->metadata().objects) objects += o.length;
    EXPECT_EQ(stored + objects, fp.bytes_written);
  }
  EXPECT_EQ(fp.bytes_written, plain.bytes_written);

  // Balance: each DP group (ranks of one tp) splits its bytes four ways.
  uint64_t busiest = 0;
  for (int tp = 0; tp < 2; ++tp) {
    uint64_t group_total = 0, group_busiest = 0;
    for (int dp = 0; dp < 4; ++dp) {
      uint64_t b = fp.rank_bytes_written[tp + 2 * dp];
      group_total += b;
      group_busiest = std::max(group_busiest, b);
    }
    busiest = std::max(busiest, group_busiest);
    EXPECT_LE(group_busiest, 1.1 * group_total / 4) << "DP group of tp " << tp;
    if (world.rank() == 0) {
      std::printf("DP group tp=%d: busiest rank %llu bytes = %.4f x its group's total/4\n", tp,
                  static_cast<unsigned long long>(group_busiest),
                  group_busiest / (group_total / 4.0));
    }
  }
  EXPECT_LE(busiest, 1.1 * fp.bytes_written / 4);
  // The plain save puts every tensor on DP rank 0; the other ranks write
  // only their own rng_state object.
  for (int r = 2; r < 8; ++r) EXPECT_LT(plain.rank_bytes_written[r], 100u) << "rank " << r;

  if (world.rank() == 0) {
    std::printf("busiest rank overall: %llu bytes = %.4f x total/4\n",
                static_cast<unsigned long long>(busiest), busiest / (fp.bytes_written / 4.0));
    EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/plain", tmp.path() + "/fp").identical());
    EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/plain", tmp.path() + "/fp-async").identical());
  }

  StepOptions load_fp;
  load_fp.load.kind = LoadStrategy::Kind::kFullyParallel;
  StepReport loaded = LoadStep(s, nullptr, kTopology, "tp=4,dp=2", tmp.path() + "/fp", world,
                               s.strict, VerifyPolicy::kWhenWhole, load_fp);
  EXPECT_TRUE(loaded.ok) << loaded.error;
  world.Barrier();
}

}  // namespace
}  // namespace distckpt
