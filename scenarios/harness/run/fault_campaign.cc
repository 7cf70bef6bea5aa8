#include "harness/run/fault_campaign.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/crash_env.h"

namespace distckpt {
namespace {

const char* OutcomeName(FaultOutcome o) {
  switch (o) {
    case FaultOutcome::kPrevious:
      return "previous";
    case FaultOutcome::kNew:
      return "new";
    case FaultOutcome::kRefused:
      return "refused";
    case FaultOutcome::kViolation:
      break;
  }
  return "violation";
}

// The operation numbers to crash at: all of them, or `sample` spread evenly
// (the first and the last included).
std::vector<int64_t> Points(int64_t total, int64_t sample) {
  std::vector<int64_t> points;
  if (sample <= 0 || sample >= total) {
    for (int64_t i = 0; i < total; ++i) points.push_back(i);
    return points;
  }
  for (int64_t i = 0; i < sample; ++i) {
    int64_t p = sample == 1 ? 0 : i * (total - 1) / (sample - 1);
    if (points.empty() || points.back() != p) points.push_back(p);
  }
  return points;
}

}  // namespace

std::string FaultCampaignReport::Summary() const {
  std::string counts;
  for (const auto& [what, n] : outcomes) counts += fmt::format(" {}={}", what, n);
  return fmt::format("{}: {} points, {} cases,{} violations={}", name, points, cases, counts,
                     violations.size());
}

FaultCampaignReport RunFaultCampaign(const FaultCampaign& c) {
  FaultCampaignReport report;
  report.name = c.name;
  CrashTestEnv env(Env::Default(), c.trash_dir);
  c.prepare();
  c.save(&env);  // fault-free: numbers the operations
  report.points = env.operations();
  std::vector<std::string> log = env.operation_log();
  FaultCheck clean = c.check();
  if (clean.outcome != FaultOutcome::kNew) {
    report.violations.push_back(
        fmt::format("{}: the fault-free save does not load as the new checkpoint: {} {}", c.name,
                    OutcomeName(clean.outcome), clean.detail));
    return report;
  }
  for (int64_t point : Points(report.points, c.sample)) {
    for (bool power_loss : {false, true}) {
      if (power_loss ? !c.power_loss : !c.crash) continue;
      env.Reset();
      c.prepare();
      env.CrashAtOperation(point);
      try {
        c.save(&env);
      } catch (const std::exception&) {
        // The save crashed (or failed after the crash): what matters is the disk.
      }
      if (power_loss) env.DropUnsyncedData();
      std::string where =
          point < static_cast<int64_t>(log.size()) ? log[point] : std::to_string(point);
      where += power_loss ? " + power loss" : "";
      if (!env.crashed()) where += " (the save finished before this point)";
      env.Reset();
      FaultCheck got;
      try {
        got = c.check();
      } catch (const std::exception& e) {
        got = {FaultOutcome::kViolation, std::string("check threw: ") + e.what()};
      }
      if (got.outcome == FaultOutcome::kRefused && c.recover) {
        std::string bad;
        try {
          bad = c.recover();
        } catch (const std::exception& e) {
          bad = e.what();
        }
        if (!bad.empty())
          got = {FaultOutcome::kViolation, "not recovered by the next save: " + bad};
      }
      ++report.cases;
      ++report.outcomes[fmt::format("{}/{}", power_loss ? "power-loss" : "crash",
                                    OutcomeName(got.outcome))];
      if (got.outcome == FaultOutcome::kViolation) {
        report.violations.push_back(fmt::format("{}: crash at {}: {}", c.name, where, got.detail));
      }
    }
  }
  return report;
}

}  // namespace distckpt
