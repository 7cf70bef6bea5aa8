// bench/compare: turns Google Benchmark JSON into the tracked ratios of
// bench/baseline.json and fails (exit 1) when any ratio regresses beyond its
// tolerance. Ratios, not absolute times, so the gate holds across machines.
//
//   compare --results R.json [--results R2.json ...] --baseline bench/baseline.json
//           [--update | --report-only]
//
// A tracked entry is {"name", "numerator", "denominator", "baseline",
// "tolerance", "target"}: numerator and denominator name benchmarks (prefix
// of the run name, e.g. "BM_Save/65536/256"); an entry with "counter" instead
// of a denominator tracks that counter of the numerator, and one with
// "seconds" tracks the numerator's real time in seconds. The ratio passes when
// ratio <= limit if the entry has a "limit" (an absolute cap, for
// deterministic counters such as heap bytes), else ratio <= baseline * (1 +
// tolerance). `target` is the goal from the issue, reported, never gated.
// --update rewrites every baseline with this run's value (limits stay).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

struct Run {
  double real_seconds = 0;
  json counters;
};

double ToSeconds(double value, const std::string& unit) {
  if (unit == "ns") return value * 1e-9;
  if (unit == "us") return value * 1e-6;
  if (unit == "ms") return value * 1e-3;
  return value;
}

// name prefix (without /iterations:... /manual_time and aggregates) -> median run
std::map<std::string, Run> ReadRuns(const std::vector<std::string>& files) {
  std::map<std::string, Run> runs;
  for (const std::string& file : files) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read " + file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Google Benchmark writes NaN / inf for undefined aggregates (the cv of
    // an all-zero counter), which JSON has no literal for.
    text = std::regex_replace(text, std::regex(R"(:\s*-?(NaN|nan|inf|Infinity)\b)"), ": null");
    json j = json::parse(text);
    for (const json& b : j.at("benchmarks")) {
      std::string name = b.at("run_name").get<std::string>();
      if (b.contains("aggregate_name") && b.at("aggregate_name") != "median") continue;
      Run run;
      run.real_seconds = ToSeconds(b.at("real_time").get<double>(), b.value("time_unit", "ns"));
      for (auto it = b.begin(); it != b.end(); ++it) {
        if (it.value().is_number()) run.counters[it.key()] = it.value();
      }
      runs[name] = run;
    }
  }
  return runs;
}

const Run* Find(const std::map<std::string, Run>& runs, const std::string& prefix) {
  for (const auto& [name, run] : runs) {
    if (name == prefix || name.rfind(prefix + "/", 0) == 0) return &run;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> results;
  std::string baseline_path;
  bool update = false, report_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--results" && i + 1 < argc)
      results.push_back(argv[++i]);
    else if (a == "--baseline" && i + 1 < argc)
      baseline_path = argv[++i];
    else if (a == "--update")
      update = true;
    else if (a == "--report-only")
      report_only = true;
    else {
      std::cerr << "usage: compare --results R.json [--results ...] --baseline B.json [--update | "
                   "--report-only]\n";
      return 2;
    }
  }
  if (results.empty() || baseline_path.empty()) {
    std::cerr << "compare: --results and --baseline are required\n";
    return 2;
  }
  try {
    std::map<std::string, Run> runs = ReadRuns(results);
    std::ifstream in(baseline_path);
    if (!in) throw std::runtime_error("cannot read " + baseline_path);
    json baseline = json::parse(in);
    int failed = 0, missing = 0;
    std::cout << fmt::format("{:<50} {:>9} {:>9} {:>7} {:>8}  {}\n", "tracked ratio", "now",
                             "baseline", "limit", "target", "verdict");
    for (json& entry : baseline.at("ratios")) {
      std::string name = entry.at("name");
      const Run* num = Find(runs, entry.at("numerator"));
      double value = NAN;
      if (num && entry.contains("denominator")) {
        const Run* den = Find(runs, entry.at("denominator"));
        if (den && den->real_seconds > 0) value = num->real_seconds / den->real_seconds;
      } else if (num && entry.contains("counter")) {
        const json& c = num->counters;
        if (c.contains(entry.at("counter")))
          value = c.at(entry.at("counter").get<std::string>()).get<double>();
      } else if (num && entry.value("seconds", false)) {
        value = num->real_seconds;
      }
      if (std::isnan(value)) {
        if (report_only) continue;  // a partial run (e.g. ci/bench's disk run)
        std::cout << fmt::format("{:<50} {:>9} {:>9} {:>7} {:>8}  MISSING\n", name, "-", "-", "-",
                                 "-");
        ++missing;
        continue;
      }
      double base = entry.at("baseline").get<double>();
      double limit = entry.contains("limit") ? entry.at("limit").get<double>()
                                             : base * (1 + entry.at("tolerance").get<double>());
      bool ok = value <= limit;
      std::string target =
          entry.contains("target") ? fmt::format("{:.3f}", entry.at("target").get<double>()) : "-";
      std::cout << fmt::format("{:<50} {:>9.3f} {:>9.3f} {:>7.3f} {:>8}  {}\n", name, value, base,
                               limit, target,
                               report_only ? (ok ? "-" : "above limit")
                               : ok        ? "ok"
                                           : "REGRESSED");
      failed += !ok;
      if (update) entry["baseline"] = std::round(value * 1000) / 1000;
    }
    if (update) {
      std::ofstream out(baseline_path);
      out << baseline.dump(2) << "\n";
      std::cout << "baseline updated: " << baseline_path << "\n";
      return missing ? 1 : 0;
    }
    if (report_only) {
      std::cout << "report only: not gated\n";
      return 0;
    }
    std::cout << fmt::format("{} tracked, {} regressed, {} missing\n", baseline.at("ratios").size(),
                             failed, missing);
    return !report_only && (failed || missing) ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "compare: " << e.what() << "\n";
    return 2;
  }
}
