#include "property/harness.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "scenario/values.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// The counterexample of the last failing case (the minimal one once
// RapidCheck has shrunk).
struct Recorded {
  Scenario scenario;
  std::string why, note;
  ScenarioCheck check;  // set by CheckScenario: shrink further with it
  GenLimits limits;
};
std::mutex recorded_mu;
std::optional<Recorded> recorded;

bool ParamsSet(const char* key) {
  const char* params = std::getenv("RC_PARAMS");
  return params != nullptr && std::string(params).find(key) != std::string::npos;
}

// The run's seed (RC_PARAMS or RapidCheck's fresh one; rank 0's under MPI,
// so that every rank draws the same cases) and the budget.
rc::detail::TestParams ResolveParams(const PropertyOptions& options) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (!ParamsSet("max_success")) params.maxSuccess = options.cases;
  if (options.world != nullptr) {
    std::string seed = std::to_string(params.seed);
    options.world->Broadcast(seed, 0);
    params.seed = std::stoull(seed);
  }
  return params;
}

// Case counts per tag (a case counts once per tag it carries).
std::map<std::string, int> CountTags(const rc::detail::Distribution& distribution) {
  std::map<std::string, int> counts;
  for (const auto& [tags, n] : distribution) {
    for (const std::string& tag : tags) {  // RapidCheck shows strings quoted
      const bool quoted = tag.size() >= 2 && tag.front() == '"' && tag.back() == '"';
      counts[quoted ? tag.substr(1, tag.size() - 2) : tag] += n;
    }
  }
  return counts;
}

void ReportClasses(const std::string& id, int cases, const rc::detail::Distribution& distribution,
                   const std::vector<ClassMinimum>& minimums, bool print) {
  std::map<std::string, int> counts = CountTags(distribution);
  if (print) {
    std::cout << fmt::format("[property] {}: {} cases passed; classes:\n", id, cases);
    for (const auto& [tag, n] : counts) {
      std::cout << fmt::format("  {:<26} {:>6}  {:5.1f}%\n", tag, n, 100.0 * n / cases);
    }
  }
  for (const ClassMinimum& m : minimums) {
    const int want = static_cast<int>(m.fraction * cases);
    const int got = counts.count(m.tag) ? counts.at(m.tag) : 0;
    EXPECT_GE(got, want) << fmt::format(
        "class '{}' ran {} of {} cases, below its minimum of {:.0f}%: the generator no longer "
        "produces it often enough",
        m.tag, got, cases, 100 * m.fraction);
  }
}

std::string WriteCounterexample(const Recorded& rec, const std::string& id, uint64_t seed) {
  std::string name = id;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '.';
  }
  std::string path = (fs::path(CounterexampleDir()) / fmt::format("{}-seed{}.json", name, seed)).string();
  std::ofstream out(path);
  out << rec.scenario.ToJson(rec.note).dump(2) << "\n";
  if (!out) return "";
  return path;
}

}  // namespace

void RunProperty(const rc::detail::Property& property, const PropertyOptions& options) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = fmt::format("{}/{}", info->test_suite_name(), info->name());
  metadata.description = info->name();
  const rc::detail::TestParams params = ResolveParams(options);
  // RapidCheck draws the same cases for every property of a seed; each
  // property gets its own stream (the printed seed still reproduces it).
  rc::detail::TestParams own = params;
  own.seed = params.seed ^ KeyHash(metadata.id);
  const bool print = options.world == nullptr || options.world->rank() == 0;
  const std::string test = fmt::format("{}.{}", info->test_suite_name(), info->name());
  if (print) {
    std::cout << fmt::format("[property] {}: seed={} cases={} (rerun: RC_PARAMS=\"seed={}\" "
                             "--gtest_filter={})\n",
                             test, params.seed, params.maxSuccess, params.seed, test)
              << std::flush;
  }
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded.reset();
  }
  const rc::detail::TestResult result = rc::detail::checkProperty(property, metadata, own);
  if (result.is<rc::detail::SuccessResult>()) {
    const auto& success = result.get<rc::detail::SuccessResult>();
    ReportClasses(test, success.numSuccess, success.distribution, options.minimums, print);
    return;
  }
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  std::optional<Recorded> rec;
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    rec.swap(recorded);
  }
  std::string replay;
  if (rec && rec->check) {  // every rank shrinks: under MPI the check is collective
    ShrinkResult shrunk = ShrinkScenario(rec->scenario, rec->why, rec->limits, rec->check);
    rec->scenario = shrunk.scenario;
    replay = fmt::format("\nscenario shrinking: {} checks, {} simplifications kept; the written scenario "
                         "fails with: {}",
                         shrunk.runs, shrunk.steps, shrunk.failure);
  }
  if (result.is<rc::detail::FailureResult>() && print) {
    std::string path = rec ? WriteCounterexample(*rec, test, params.seed) : "";
    replay += path.empty() ? "\n(this property's cases are not scenarios: the counterexample above is all)"
                           : fmt::format("\nshrunk counterexample: {}\nreplay: distckpt run {}", path, path);
  }
  ADD_FAILURE() << message.str() << fmt::format("\nseed: {} (rerun: RC_PARAMS=\"seed={}\" --gtest_filter={})",
                                                params.seed, params.seed, test)
                << replay;
}

void Tag(const std::vector<std::string>& tags) {
  for (const std::string& t : tags) RC_TAG(t);
}

void FailCase(const Scenario& scenario, const std::string& why, const std::string& note) {
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded = Recorded{scenario, why, note, nullptr, GenLimits{}};
  }
  RC_FAIL(why);
}

void CheckScenario(const Scenario& scenario, const GenLimits& limits, const ScenarioCheck& check) {
  std::optional<std::string> why = check(scenario);
  if (!why) return;
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded = Recorded{scenario, *why, "", check, limits};
  }
  RC_FAIL(*why);
}

std::string CounterexampleDir() {
  const char* env = std::getenv("DISTCKPT_PROPERTY_OUT");
  fs::path dir = env != nullptr && *env ? fs::path(env) : fs::temp_directory_path() / "distckpt-property";
  fs::create_directories(dir);
  return dir.string();
}

std::string MakeWorkDir() {
  const char* env = std::getenv("DISTCKPT_PROPERTY_WORK");
  fs::path base = env != nullptr && *env ? fs::path(env)
                  : access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                  : fs::temp_directory_path();
  fs::create_directories(base);
  std::string tmpl = (base / "distckpt-property-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) Fail(ErrorKind::kIo, "cannot create a directory in {}", base.string());
  return tmpl;
}

}  // namespace distckpt
