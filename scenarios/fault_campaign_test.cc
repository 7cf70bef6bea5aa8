// The crash and power-loss campaign over the public save paths
// (harness/run/fault_campaign.h): every mutating file operation of a save over
// an existing checkpoint, for native and DCP, plain / fully parallel / async
// saves, in place (overwrite), beside the previous checkpoint (a new
// directory) and local checkpoints, on a 4-rank thread world. After each
// crash (and each crash + power loss): the previous checkpoint loads
// bit-exact, or the new one does, or a load refuses and the next save
// recovers; never other values, never a lost previous checkpoint.
//
// fault_campaign_test runs DISTCKPT_CAMPAIGN_SAMPLE points per campaign (the
// default suite); fault_campaign_full_test (label slow) runs every point.
#include "harness/run/fault_campaign.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "comm/thread_world.h"
#include "format/format.h"
#include "harness/run/runner.h"
#include "io/testing.h"

#ifndef DISTCKPT_CAMPAIGN_SAMPLE
#define DISTCKPT_CAMPAIGN_SAMPLE 0
#endif

namespace distckpt {
namespace {

namespace fs = std::filesystem;

constexpr char kTopology[] = "tp=2,dp=2";
constexpr int kWorld = 4;

Scenario CampaignScenario(int seed) {
  return Scenario::FromJson(
      {{"name", "campaign"},
       {"seed", seed},
       {"tensors",
        {{{"key", "layer.weight"}, {"shape", {16, 12}}, {"dtype", "f32"}, {"shard", {{"0", "tp"}}}},
         {{"key", "layer.bias"}, {"shape", {12}}, {"dtype", "bf16"}},
         {{"key", "uneven"},
          {"shape", {7, 3}},
          {"dtype", "f32"},
          {"shard", {{"0", {"tp", "dp"}}}},
          {"split", "chunk"}},
         {{"key", "exp_avg"},
          {"shape", {8, 6}},
          {"dtype", "f32"},
          {"shard", {{"0", "tp"}}},
          {"flatten", "dp"}}}},
       {"objects", {{{"key", "rng_state"}, {"per", {"tp"}}}, {{"key", "iteration"}}}},
       {"topologies", {kTopology}}},
      "campaign");
}

enum class Mode { kOverwrite, kNewDir, kLocal };

struct Config {
  std::string name;
  Mode mode;
  std::string format;  // native | dcp
  bool fully_parallel = false;
  bool async = false;
};

std::string ConfigName(const testing::TestParamInfo<Config>& info) { return info.param.name; }

std::vector<Config> Configs() {
  std::vector<Config> configs;
  for (const char* format : {"native", "dcp"}) {
    for (Mode mode : {Mode::kOverwrite, Mode::kNewDir}) {
      std::string m = mode == Mode::kOverwrite ? "Overwrite" : "NewDir";
      std::string f = std::string(format) == "native" ? "Native" : "Dcp";
      configs.push_back({m + f + "Plain", mode, format});
      configs.push_back({m + f + "FullyParallel", mode, format, true});
      configs.push_back({m + f + "Async", mode, format, false, true});
      configs.push_back({m + f + "FullyParallelAsync", mode, format, true, true});
    }
  }
  // Local checkpoints mix two saves after a crash (issue 15 defect 4, being
  // fixed on the trustfix branch): only the full campaign (slow) runs them
  // until that lands; then move this line out of the condition.
  if (DISTCKPT_CAMPAIGN_SAMPLE == 0) configs.push_back({"Local", Mode::kLocal, "native"});
  return configs;
}

class FaultCampaignTest : public testing::TestWithParam<Config> {
 protected:
  const Config& config() const { return GetParam(); }

  StepOptions Options(Env* env) const {
    StepOptions s;
    s.env = env;
    if (config().fully_parallel) {
      s.save.kind = SaveStrategy::Kind::kFullyParallel;
      s.load.kind = LoadStrategy::Kind::kFullyParallel;
    }
    s.async = config().async;
    s.save.writers = 2;
    s.overwrite = config().mode == Mode::kOverwrite;
    if (config().mode == Mode::kLocal) {
      s.local_dir = target_;
      s.replication = {1, 2};
    }
    return s;
  }

  // The step over `dir` by every rank of a thread world; rank 0's report.
  StepReport Save(const Scenario& s, const std::string& dir, Env* env) const {
    StepReport report;
    const Format* format = &FormatByName(config().format);
    RunRanks(kWorld, [&](Communicator& comm) {
      StepReport r = SaveStep(s, nullptr, kTopology, dir, comm, format, Options(env));
      if (comm.rank() == 0) report = r;
    });
    return report;
  }
  StepReport Load(const Scenario& s, const std::string& dir) const {
    StepReport report;
    RunRanks(kWorld, [&](Communicator& comm) {
      StepReport r =
          LoadStep(s, nullptr, kTopology, kTopology, dir, comm, StrictHandling::kAssumeOkUnexpected,
                   VerifyPolicy::kAlways, Options(nullptr));
      if (comm.rank() == 0) report = r;
    });
    return report;
  }

  // Previous, new, refused, or a violation (values of neither).
  FaultCheck Classify(const std::string& dir) const {
    StepReport old_load = Load(previous_, dir);
    if (old_load.ok) return {FaultOutcome::kPrevious, ""};
    StepReport new_load = Load(next_, dir);
    if (new_load.ok) return {FaultOutcome::kNew, ""};
    if (old_load.value_mismatch && new_load.value_mismatch) {
      return {FaultOutcome::kViolation, "loaded values of neither checkpoint: " + new_load.error};
    }
    if (old_load.other_exception || new_load.other_exception) {
      return {FaultOutcome::kViolation, "not a CheckpointError: " + new_load.error};
    }
    return {FaultOutcome::kRefused, new_load.error};
  }

  void SetUp() override {
    root_ = JoinPath(tmp_.path(), "work");
    fs::create_directories(root_);
    target_ = JoinPath(root_, config().mode == Mode::kNewDir ? "iter2" : "ckpt");
    previous_dir_ = config().mode == Mode::kNewDir ? JoinPath(root_, "iter1") : target_;
    pristine_ = JoinPath(tmp_.path(), "pristine");
    StepReport saved = Save(previous_, previous_dir_, nullptr);
    ASSERT_TRUE(saved.ok) << saved.error;
    fs::copy(root_, pristine_, fs::copy_options::recursive);
  }

  // Back to the previous checkpoint alone.
  void Restore() const {
    fs::remove_all(root_);
    fs::copy(pristine_, root_, fs::copy_options::recursive);
  }

  FaultCampaign Campaign() {
    FaultCampaign c;
    c.name = config().name;
    c.trash_dir = JoinPath(tmp_.path(), "trash");
    c.sample = DISTCKPT_CAMPAIGN_SAMPLE;
    c.prepare = [this] { Restore(); };
    c.save = [this](Env* env) { Save(next_, target_, env); };
    c.check = [this]() -> FaultCheck {
      if (config().mode == Mode::kNewDir) {
        StepReport old_load = Load(previous_, previous_dir_);
        if (!old_load.ok) return {FaultOutcome::kViolation, "previous lost: " + old_load.error};
      }
      FaultCheck got = Classify(target_);
      if (config().mode == Mode::kNewDir && got.outcome == FaultOutcome::kPrevious) {
        return {FaultOutcome::kViolation, "the new directory loads the previous values"};
      }
      return got;
    };
    c.recover = [this]() -> std::string {
      StepReport saved = Save(next_, target_, nullptr);
      if (!saved.ok) return "save: " + saved.error;
      FaultCheck got = Classify(target_);
      return got.outcome == FaultOutcome::kNew ? "" : "after the next save: " + got.detail;
    };
    return c;
  }

  ScopedTempDir tmp_;
  std::string root_, target_, previous_dir_, pristine_;
  Scenario previous_ = CampaignScenario(1), next_ = CampaignScenario(2);
};

TEST_P(FaultCampaignTest, PreviousOrNewCheckpointAfterEveryCrashAndPowerLoss) {
  FaultCampaignReport report = RunFaultCampaign(Campaign());
  std::cout << report.Summary() << "\n";
  EXPECT_GT(report.points, 10);
  EXPECT_EQ(report.cases, 2 * (DISTCKPT_CAMPAIGN_SAMPLE
                                   ? std::min<int64_t>(DISTCKPT_CAMPAIGN_SAMPLE, report.points)
                                   : report.points));
  for (const std::string& v : report.violations) ADD_FAILURE() << v;
}

INSTANTIATE_TEST_SUITE_P(Saves, FaultCampaignTest, testing::ValuesIn(Configs()), ConfigName);

}  // namespace
}  // namespace distckpt
