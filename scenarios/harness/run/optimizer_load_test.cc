// Megatron test_finetune_doesnt_load_optimizer (docs/megatron-semantics.md §7.4): a
// dp_reshardable checkpoint loaded under another TP or PP (or, with experts,
// another EP) fails with a clear error before anything is read, on every
// rank; the same checkpoint loads under a DP change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "comm/thread_world.h"
#include "engine/metadata_api.h"
#include "harness/run/runner.h"
#include "io/forwarding_env.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

Scenario MoeDpReshardable() {
  return Scenario::FromJson(nlohmann::json::parse(R"({
      "model": {"kind": "gpt", "layers": 4, "hidden": 16, "ffn": 32, "heads": 4, "vocab": 64,
                "experts": 4, "moe_layer_freq": 2},
      "optimizer": {"format": "dp_reshardable", "step": 3}})"),
                            "t.json");
}

std::vector<StepReport> LoadOn(const Scenario& s, const std::string& saved, const std::string& topo,
                               const std::string& dir) {
  int world = Topology::Parse(topo).world_size();
  std::vector<StepReport> reports(world);
  RunRanks(world, [&](Communicator& comm) {
    reports[comm.rank()] =
        LoadStep(s, nullptr, saved, topo, dir, comm, StrictHandling::kAssumeOkUnexpected);
  });
  return reports;
}

TEST(OptimizerLoadTest, DpReshardableRefusesOtherTpPpOrEpBeforeReadingAnything) {
  Scenario s = MoeDpReshardable();
  const std::string saved = "tp=2,pp=2,dp=2,ep=2";
  const std::string dir =
      (fs::temp_directory_path() / ("optimizer_load_test_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  RunRanks(8, [&](Communicator& comm) { ASSERT_TRUE(SaveStep(s, nullptr, saved, dir, comm).ok); });
  const std::pair<const char*, const char*> refused[] = {
      {"tp=2,pp=1,dp=4,ep=2", "(TP, PP) mismatch after resume ((2, 2) vs (2, 1))"},
      {"tp=4,pp=2,dp=1,ep=1", "(TP, PP) mismatch after resume ((2, 2) vs (4, 2))"},
      {"tp=2,pp=2,dp=2,ep=1", "EP mismatch after resume (2 vs 1)"},
  };
  for (const auto& [topo, message] : refused) {
    for (const StepReport& r : LoadOn(s, saved, topo, dir)) {
      EXPECT_FALSE(r.ok) << topo;
      EXPECT_FALSE(r.value_mismatch) << topo;  // an input error (CLI exit 2), not a verdict
      EXPECT_NE(r.error.find(message), std::string::npos) << topo << ": " << r.error;
      EXPECT_EQ(r.bytes_needed, 0u) << topo;  // refused before any request was built
      EXPECT_EQ(r.bytes_read, 0u) << topo;
    }
  }
  for (const StepReport& r : LoadOn(s, saved, "tp=2,pp=2,dp=4,ep=2", dir)) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.bytes_read, 0u);
  }
  fs::remove_all(dir);
}

// LoadStep of an optimizer scenario reads the common state (the optimizer
// check) and the chunks through one open of the checkpoint per rank: each
// rank reads the metadata as often as one OpenCheckpoint does, not again for
// the common state.
TEST(OptimizerLoadTest, LoadStepOpensTheCheckpointOncePerRank) {
  struct Opens : ForwardingEnv {
    Opens() : ForwardingEnv(Env::Default()) {}
    void OnAccess(const char* op, const std::string& path) override {
      std::lock_guard<std::mutex> lock(mu);
      if (std::string(op) == "open" && path.find("optimizer_open_test_") != std::string::npos)
        ++count[path];
    }
    std::mutex mu;
    std::map<std::string, int> count;
  } opens;
  Scenario s = Scenario::FromJson(nlohmann::json::parse(R"({
      "model": {"kind": "gpt", "layers": 2, "hidden": 8, "ffn": 16, "heads": 2, "vocab": 64},
      "optimizer": {"format": "dp_reshardable", "step": 3}})"),
                                  "t.json");
  const std::string dir =
      (fs::temp_directory_path() / ("optimizer_open_test_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  RunRanks(2, [&](Communicator& comm) { ASSERT_TRUE(SaveStep(s, nullptr, "dp=2", dir, comm).ok); });
  // What one open reads (the metadata file, once or twice: detection, then
  // the reader), then what LoadStep reads on 2 ranks.
  OpenCheckpoint(dir, &opens);
  const std::map<std::string, int> one_open = opens.count;
  ASSERT_FALSE(one_open.empty());
  opens.count.clear();
  StepOptions step;
  step.env = &opens;
  RunRanks(2, [&](Communicator& comm) {
    StepReport r = LoadStep(s, nullptr, "dp=2", "dp=2", dir, comm,
                            StrictHandling::kAssumeOkUnexpected, VerifyPolicy::kWhenWhole, step);
    EXPECT_TRUE(r.ok) << r.error;
  });
  for (const auto& [path, n] : one_open) EXPECT_EQ(opens.count[path], 2 * n) << path;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace distckpt
