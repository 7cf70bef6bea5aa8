// distckpt diff: two checkpoints compared in global space.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "engine/checkpoint_diff.h"

namespace distckpt {

namespace {

nlohmann::json KeyJson(const KeyDiff& k) {
  nlohmann::json j = {{"key", k.key}, {"kind", k.kind}, {"verdict", k.verdict}};
  if (!k.detail.empty()) j["detail"] = k.detail;
  if (k.kind == "tensor" && k.elements > 0) {
    j["elements"] = k.elements;
    j["differing"] = k.differing;
    if (k.differing > 0) {
      j["first_index"] = k.first_index;
      // JSON has no infinity: a NaN against a number, or an error relative to 0, is null.
      auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; };
      j["max_abs_error"] = finite(k.max_abs_error);
      j["max_rel_error"] = finite(k.max_rel_error);
    }
  }
  return j;
}

// The diff as report cases, one per compared key (the narrow interface
// between the diff and the CI reports).
Report DiffReport(const std::string& a, const std::string& b, const CheckpointDiff& diff) {
  Report report;
  report.command = "diff";
  report.title = fmt::format("{} vs {}", a, b);
  for (const KeyDiff& k : diff.keys) {
    std::string message = k.detail;
    if (k.verdict == "only_a") message = "only in " + a;
    if (k.verdict == "only_b") message = "only in " + b;
    report.cases.push_back(
        {"distckpt.diff", k.key, k.verdict == "identical", message, 0, KeyJson(k)});
  }
  report.extra = {{"a", a},
                  {"b", b},
                  {"identical", diff.identical()},
                  {"tensors_compared", diff.tensors_compared},
                  {"elements_compared", diff.elements_compared},
                  {"objects_compared", diff.objects_compared},
                  {"keys_skipped", diff.keys_skipped}};
  return report;
}

int DiffCommand(const std::string& a, const std::string& b, const DiffOptions& options, bool json,
                const ReportPaths& reports) {
  CheckpointDiff diff = DiffCheckpoints(a, b, options);
  if (!reports.json.empty() || !reports.junit.empty() || !reports.markdown.empty()) {
    WriteReports(reports, DiffReport(a, b, diff));
  }
  if (json) {
    std::cout << ReportToJson(DiffReport(a, b, diff)).dump(2) << "\n";
    return diff.identical() ? kExitOk : kExitVerdictFailed;
  }
  for (const std::string& key : diff.only_a) std::cout << fmt::format("only in {}: {}\n", a, key);
  for (const std::string& key : diff.only_b) std::cout << fmt::format("only in {}: {}\n", b, key);
  for (const std::string& line : diff.mismatches) std::cout << "differs: " << line << "\n";
  std::cout << fmt::format(
      "{}: {} tensors ({} elements) and {} objects compared{}\n",
      diff.identical() ? "identical" : "DIFFERENT", diff.tensors_compared, diff.elements_compared,
      diff.objects_compared,
      diff.keys_skipped > 0
          ? fmt::format(", {} keys left out (--only / --exclude)", diff.keys_skipped)
          : "");
  return diff.identical() ? kExitOk : kExitVerdictFailed;
}

struct DiffArgs {
  std::string a, b;
  DiffOptions options;
  bool json = false;
  ReportPaths reports;
};

}  // namespace

Command AddDiffCommand(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* diff =
      app.add_subcommand("diff", "compare two checkpoints in global space (any layouts, formats)");
  diff->add_option("a", args->a, "first checkpoint directory")->required();
  diff->add_option("b", args->b, "second checkpoint directory")->required();
  diff->add_option("--atol", args->options.atol, "absolute tolerance (default: bitwise equality)");
  diff->add_option("--rtol", args->options.rtol, "relative tolerance");
  diff->add_option("--only", args->options.only,
                   "compare only keys matching this glob (repeatable; objects match by key or "
                   "unique key, the common state is 'common')");
  diff->add_option("--exclude", args->options.exclude,
                   "leave out keys matching this glob (repeatable)");
  diff->add_flag("--json", args->json,
                 "print a JSON verdict per key (elements, differing, max abs / rel error)");
  AddReportOptions(diff, args->reports, "key");
  return {diff, [args](CommandLine&) {
            ResolveRunRoot(args->a);
            ResolveRunRoot(args->b);
            return DiffCommand(args->a, args->b, args->options, args->json, args->reports);
          }};
}

}  // namespace distckpt
