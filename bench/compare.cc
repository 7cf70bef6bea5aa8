// bench/compare: turns Google Benchmark JSON into the tracked ratios of
// bench/baseline.json and fails (exit 1) when any ratio regresses beyond its
// tolerance. Ratios, not absolute times, so the gate holds across machines.
//
//   compare --results R.json [--results R2.json ...] --baseline bench/baseline.json
//           [--update | --report-only] [--suspects FILE] [--best]
//
// Every benchmark run (a repetition, or a median aggregate) of a name in the
// results is a sample. By default an entry's value is from the median
// samples (a repetition where no median was written); --best takes the
// lowest of all samples (the gate's re-measurement of a suspect: a
// regression slows every sample, a burst of load only some) and prints the
// spread of the samples. --suspects writes the numerators of the regressed
// entries, one a line, for ci/bench to re-measure. A benchmark that skipped
// itself (a cold benchmark where eviction is impossible) is reported as
// skipped with its reason, neither failed nor missing.
//
// A tracked entry is {"name", "numerator", "denominator", "baseline",
// "tolerance", "target"}: numerator and denominator name benchmarks (prefix
// of the run name, e.g. "BM_Save/65536/256"); an entry with "counter" instead
// of a denominator tracks that counter of the numerator, and one with
// "seconds" tracks the numerator's real time in seconds, and one with
// "cpu_seconds" its CPU time (of the benchmark's thread: for single-threaded
// work, what another CPU count or other processes do not inflate, where the
// wall time under `taskset -c 0` at a load of 24 was 20x). The ratio passes when
// ratio <= limit if the entry has a "limit" (an absolute cap, for
// deterministic counters such as heap bytes), else ratio <= baseline * (1 +
// tolerance). An entry with "or_limit_of": NAME passes also under the limit
// of entry NAME (a cold load's ratio lies between 1, on a disk much slower
// than the CPU, and its warm counterpart's, on a disk much faster: so a
// cold ratio within the warm limit is no regression on any disk).
// `target` is the goal from the issue, reported, never gated.
// --update rewrites every baseline with this run's value (limits stay).
#include <fmt/format.h>

#include <algorithm>
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
  double cpu_seconds = 0;
  json counters;
  bool median = false;  // a median aggregate
};

// Every sample of one benchmark name.
struct Samples {
  std::vector<Run> runs;
  std::string skipped;  // the error message of a benchmark that skipped itself
};

double ToSeconds(double value, const std::string& unit) {
  if (unit == "ns") return value * 1e-9;
  if (unit == "us") return value * 1e-6;
  if (unit == "ms") return value * 1e-3;
  return value;
}

// run name (without /iterations:... /manual_time and aggregates) -> samples
std::map<std::string, Samples> ReadRuns(const std::vector<std::string>& files) {
  std::map<std::string, Samples> runs;
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
      if (b.value("error_occurred", false)) {
        runs[name].skipped = b.value("error_message", "skipped");
        continue;
      }
      if (b.contains("aggregate_name") && b.at("aggregate_name") != "median") continue;
      Run run;
      run.median = b.contains("aggregate_name");
      run.real_seconds = ToSeconds(b.at("real_time").get<double>(), b.value("time_unit", "ns"));
      run.cpu_seconds = ToSeconds(b.value("cpu_time", 0.0), b.value("time_unit", "ns"));
      for (auto it = b.begin(); it != b.end(); ++it) {
        if (it.value().is_number()) run.counters[it.key()] = it.value();
      }
      runs[name].runs.push_back(run);
    }
  }
  return runs;
}

const Samples* Find(const std::map<std::string, Samples>& runs, const std::string& prefix) {
  for (const auto& [name, samples] : runs) {
    if (name == prefix || name.rfind(prefix + "/", 0) == 0) return &samples;
  }
  return nullptr;
}

// An entry's own limit: its cap, else baseline x (1 + tolerance).
double Limit(const json& entry) {
  if (entry.contains("limit")) return entry.at("limit").get<double>();
  return entry.at("baseline").get<double>() * (1 + entry.at("tolerance").get<double>());
}

// An entry's value from one sample (NaN where it has no such figure).
double Value(const json& entry, const Run& num, const Samples* den) {
  if (entry.contains("denominator")) {
    if (!den || den->runs.empty()) return NAN;
    // The denominator's sample of the same kind (median, or the first).
    const Run* d = &den->runs.front();
    for (const Run& r : den->runs) {
      if (r.median == num.median) d = &r;
    }
    return d->real_seconds > 0 ? num.real_seconds / d->real_seconds : NAN;
  }
  if (entry.contains("counter")) {
    const std::string counter = entry.at("counter");
    return num.counters.contains(counter) ? num.counters.at(counter).get<double>() : NAN;
  }
  if (entry.value("seconds", false)) return num.real_seconds;
  if (entry.value("cpu_seconds", false)) return num.cpu_seconds;
  return NAN;
}

// The values of every sample of the numerator.
std::vector<double> Values(const json& entry, const std::map<std::string, Samples>& runs) {
  std::vector<double> values;
  const Samples* num = Find(runs, entry.at("numerator"));
  if (!num) return values;
  const Samples* den =
      entry.contains("denominator") ? Find(runs, entry.at("denominator")) : nullptr;
  for (const Run& run : num->runs) {
    const double v = Value(entry, run, den);
    if (!std::isnan(v)) values.push_back(v);
  }
  return values;
}

// The value the gate judges: the median samples' (their median, if several
// files hold one), or the lowest sample with `best`.
double Judged(const json& entry, const std::map<std::string, Samples>& runs, bool best) {
  std::vector<double> values = Values(entry, runs);
  if (values.empty()) return NAN;
  if (best) return *std::min_element(values.begin(), values.end());
  const Samples* num = Find(runs, entry.at("numerator"));
  const Samples* den =
      entry.contains("denominator") ? Find(runs, entry.at("denominator")) : nullptr;
  std::vector<double> medians;
  for (const Run& run : num->runs) {
    if (run.median) medians.push_back(Value(entry, run, den));
  }
  if (medians.empty()) medians = values;
  std::sort(medians.begin(), medians.end());
  return medians[medians.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> results;
  std::string baseline_path;
  std::string suspects_path;
  bool update = false, report_only = false, best = false;
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
    else if (a == "--best")
      best = true;
    else if (a == "--suspects" && i + 1 < argc)
      suspects_path = argv[++i];
    else {
      std::cerr << "usage: compare --results R.json [--results ...] --baseline B.json [--update | "
                   "--report-only] [--suspects FILE] [--best]\n";
      return 2;
    }
  }
  if (results.empty() || baseline_path.empty()) {
    std::cerr << "compare: --results and --baseline are required\n";
    return 2;
  }
  try {
    std::map<std::string, Samples> runs = ReadRuns(results);
    std::ifstream in(baseline_path);
    if (!in) throw std::runtime_error("cannot read " + baseline_path);
    json baseline = json::parse(in);
    int failed = 0, missing = 0, skipped = 0;
    std::vector<std::string> suspects;
    std::cout << fmt::format("{:<50} {:>9} {:>9} {:>7} {:>8}  {}\n", "tracked ratio", "now",
                             "baseline", "limit", "target", "verdict");
    for (json& entry : baseline.at("ratios")) {
      std::string name = entry.at("name");
      const double value = Judged(entry, runs, best);
      if (std::isnan(value)) {
        const Samples* num = Find(runs, entry.at("numerator"));
        if (num && !num->skipped.empty()) {
          std::cout << fmt::format("{:<50} {:>9} {:>9} {:>7} {:>8}  skipped: {}\n", name, "-", "-",
                                   "-", "-", num->skipped);
          ++skipped;
          continue;
        }
        if (report_only) continue;  // a partial run (e.g. ci/bench's disk run)
        std::cout << fmt::format("{:<50} {:>9} {:>9} {:>7} {:>8}  MISSING\n", name, "-", "-", "-",
                                 "-");
        ++missing;
        continue;
      }
      double base = entry.at("baseline").get<double>();
      double limit = Limit(entry);
      if (entry.contains("or_limit_of")) {
        const std::string other = entry.at("or_limit_of");
        auto it = std::find_if(baseline.at("ratios").begin(), baseline.at("ratios").end(),
                               [&](const json& e) { return e.at("name") == other; });
        if (it == baseline.at("ratios").end()) {
          throw std::runtime_error(name + ": or_limit_of names no entry: " + other);
        }
        limit = std::max(limit, Limit(*it));
      }
      bool ok = value <= limit;
      std::string target =
          entry.contains("target") ? fmt::format("{:.3f}", entry.at("target").get<double>()) : "-";
      std::string spread;
      if (best) {
        std::vector<double> values = Values(entry, runs);
        auto [lo, hi] = std::minmax_element(values.begin(), values.end());
        spread = fmt::format(" (best of {}: {:.3f}..{:.3f})", values.size(), *lo, *hi);
      }
      std::cout << fmt::format("{:<50} {:>9.3f} {:>9.3f} {:>7.3f} {:>8}  {}{}\n", name, value, base,
                               limit, target,
                               report_only ? (ok ? "-" : "above limit")
                               : ok        ? "ok"
                                           : "REGRESSED",
                               spread);
      failed += !ok;
      if (!ok) suspects.push_back(entry.at("numerator"));
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
    if (!suspects_path.empty()) {
      std::ofstream out(suspects_path);
      for (const std::string& s : suspects) out << s << "\n";
    }
    std::cout << fmt::format("{} tracked, {} regressed, {} missing, {} skipped\n",
                             baseline.at("ratios").size(), failed, missing, skipped);
    return !report_only && (failed || missing) ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "compare: " << e.what() << "\n";
    return 2;
  }
}
