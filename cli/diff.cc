// distckpt diff: two checkpoints compared in global space.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <set>

#include "cli/commands.h"
#include "engine/checkpoint_diff.h"
#include "format/format.h"

namespace distckpt {

namespace {

// The diff as report cases, one per key (the narrow interface between the
// diff and the CI reports): the keys of both checkpoints' metadata, each
// failing when only one side holds it or a mismatch line names it.
Report DiffReport(const std::string& a, const std::string& b, const CheckpointDiff& diff) {
  Report report;
  report.command = "diff";
  report.title = fmt::format("{} vs {}", a, b);
  std::map<std::string, std::string> failing;  // key -> reason
  for (const std::string& key : diff.only_a) failing[key] = "only in " + a;
  for (const std::string& key : diff.only_b) failing[key] = "only in " + b;
  std::vector<std::string> unmatched;
  std::set<std::string> keys;
  Env* env = Env::Default();
  for (const std::string& dir : {a, b}) {
    std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
    for (const auto& [key, t] : reader->metadata().tensors) keys.insert(key);
    for (const auto& [key, o] : reader->metadata().objects) keys.insert(key);
  }
  for (const std::string& line : diff.mismatches) {
    size_t colon = line.find(": ");
    std::string key = line.substr(0, colon);
    if (colon != std::string::npos && keys.count(key)) {
      failing[key] = line.substr(colon + 2);
    } else {
      unmatched.push_back(line);  // e.g. the common state
    }
  }
  for (const std::string& key : keys) {
    auto it = failing.find(key);
    report.cases.push_back({"distckpt.diff", key, it == failing.end(),
                            it == failing.end() ? "" : it->second, 0, nullptr});
  }
  for (const std::string& line : unmatched) {
    size_t colon = line.find(": ");
    report.cases.push_back({"distckpt.diff", line.substr(0, colon), false,
                            colon == std::string::npos ? line : line.substr(colon + 2), 0,
                            nullptr});
  }
  report.extra = {{"a", a},
                  {"b", b},
                  {"identical", diff.identical()},
                  {"tensors_compared", diff.tensors_compared},
                  {"elements_compared", diff.elements_compared},
                  {"objects_compared", diff.objects_compared}};
  return report;
}

}  // namespace

int DiffCommand(const std::string& a, const std::string& b, double atol, double rtol,
                const ReportPaths& reports) {
  CheckpointDiff diff = DiffCheckpoints(a, b, {.atol = atol, .rtol = rtol});
  if (!reports.json.empty() || !reports.junit.empty() || !reports.markdown.empty()) {
    WriteReports(reports, DiffReport(a, b, diff));
  }
  for (const std::string& key : diff.only_a) std::cout << fmt::format("only in {}: {}\n", a, key);
  for (const std::string& key : diff.only_b) std::cout << fmt::format("only in {}: {}\n", b, key);
  for (const std::string& line : diff.mismatches) std::cout << "differs: " << line << "\n";
  std::cout << fmt::format("{}: {} tensors ({} elements) and {} objects compared\n",
                           diff.identical() ? "identical" : "DIFFERENT", diff.tensors_compared,
                           diff.elements_compared, diff.objects_compared);
  return diff.identical() ? kExitOk : kExitVerdictFailed;
}

}  // namespace distckpt
