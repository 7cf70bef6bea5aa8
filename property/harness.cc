#include "property/harness.h"

#include <cxxabi.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "harness/expand/values.h"

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
std::optional<Recorded> pending;  // SetCase: the current case's scenario
bool recorded_this_case = false;  // FailCase / CheckScenario ran in the current case

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

// Prints the classes; returns one message per class below its minimum.
std::vector<std::string> ReportClasses(const std::string& id, int cases,
                                       const rc::detail::Distribution& distribution,
                                       const std::vector<ClassMinimum>& minimums, bool print) {
  std::map<std::string, int> counts = CountTags(distribution);
  if (print) {
    std::cout << fmt::format("[property] {}: {} cases passed; classes:\n", id, cases);
    for (const auto& [tag, n] : counts) {
      std::cout << fmt::format("  {:<26} {:>6}  {:5.1f}%\n", tag, n, 100.0 * n / cases);
    }
  }
  std::vector<std::string> below;
  for (const ClassMinimum& m : minimums) {
    const int want = static_cast<int>(m.fraction * cases);
    const int got = counts.count(m.tag) ? counts.at(m.tag) : 0;
    if (got < want) {
      below.push_back(
          fmt::format("class '{}' ran {} of {} cases, below its minimum of {:.0f}%: the "
                      "generator no longer produces it often enough",
                      m.tag, got, cases, 100 * m.fraction));
    }
  }
  return below;
}

// "<Suite>.<Test>-seed<S>.<extension>" under CounterexampleDir().
std::string OutputPath(const std::string& id, uint64_t seed, const std::string& extension) {
  std::string name = id;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '.';
  }
  return (fs::path(CounterexampleDir()) / fmt::format("{}-seed{}.{}", name, seed, extension))
      .string();
}

std::string TypeName(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

std::string WriteCounterexample(const Recorded& rec, const std::string& id, uint64_t seed) {
  const std::string path = OutputPath(id, seed, "json");
  std::ofstream out(path);
  out << rec.scenario.ToJson(rec.note).dump(2) << "\n";
  out.close();
  return out ? path : "";
}

// The failure report beside the scenario file: seed, rerun command, message.
std::string WriteReport(const std::string& id, uint64_t seed, const std::string& report) {
  const std::string path = OutputPath(id, seed, "txt");
  std::ofstream out(path);
  out << report << "\n";
  out.close();
  return out ? path : "";
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
    std::cout << fmt::format(
                     "[property] {}: seed={} cases={} (rerun: RC_PARAMS=\"seed={}\" "
                     "--gtest_filter={})\n",
                     test, params.seed, params.maxSuccess, params.seed, test)
              << std::flush;
  }
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded.reset();
  }
  const rc::detail::TestResult result = rc::detail::checkProperty(property, metadata, own);
  const std::string rerun = fmt::format("seed: {} (rerun: RC_PARAMS=\"seed={}\" --gtest_filter={})",
                                        params.seed, params.seed, test);
  std::string report;  // empty: the property holds
  try {
    if (result.is<rc::detail::SuccessResult>()) {
      const auto& success = result.get<rc::detail::SuccessResult>();
      for (const std::string& below :
           ReportClasses(test, success.numSuccess, success.distribution, options.minimums, print)) {
        report += below + "\n";
      }
      if (!report.empty()) report += rerun;
    } else {
      std::ostringstream message;
      rc::detail::printResultMessage(result, message);
      report = message.str() + "\n" + rerun;
      std::optional<Recorded> rec;
      {
        std::lock_guard<std::mutex> lock(recorded_mu);
        rec.swap(recorded);
      }
      if (rec && rec->check) {  // every rank shrinks: under MPI the check is collective
        ShrinkResult shrunk = ShrinkScenario(rec->scenario, rec->why, rec->limits, rec->check);
        rec->scenario = shrunk.scenario;
        report += fmt::format(
            "\nscenario shrinking: {} checks, {} simplifications kept; the written "
            "scenario fails with: {}",
            shrunk.runs, shrunk.steps, shrunk.failure);
      }
      if (result.is<rc::detail::FailureResult>() && print) {
        const std::string path = rec ? WriteCounterexample(*rec, test, params.seed) : "";
        report +=
            path.empty()
                ? "\n(no scenario reproduces this case: the counterexample above is all)"
                : fmt::format("\nshrunk counterexample: {}\nreplay: distckpt run {}{}{}", path,
                              path, options.replay_flags.empty() ? "" : " ", options.replay_flags);
      }
    }
  } catch (const std::exception& e) {  // still report the seed
    report += fmt::format("\n{}\nthe harness failed while reporting: {}", rerun, e.what());
  }
  if (report.empty()) return;
  if (print) {
    try {
      const std::string path = WriteReport(test, params.seed, report);
      report += path.empty() ? "\n(the failure report could not be written)"
                             : "\nfailure report: " + path;
    } catch (const std::exception& e) {
      report += fmt::format("\n(the failure report could not be written: {})", e.what());
    }
  }
  ADD_FAILURE() << report;
}

void RunCase(const std::function<void()>& body) {
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    pending.reset();
    recorded_this_case = false;
  }
  std::string why;
  try {
    body();
    return;
  } catch (const rc::detail::CaseResult& result) {
    if (result.type == rc::detail::CaseResult::Type::Failure) {
      std::lock_guard<std::mutex> lock(recorded_mu);
      if (!recorded_this_case) recorded.reset();  // an earlier case's scenario, not this failure's
    }
    throw;
  } catch (const rc::GenerationFailure&) {
    throw;  // a discard
  } catch (const std::exception& e) {
    why = fmt::format("unexpected exception {}: {}", TypeName(typeid(e)), e.what());
  } catch (...) {
    why = "unexpected exception of an unknown type";
  }
  std::optional<Recorded> scenario;
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    scenario = pending;
    if (!scenario) recorded.reset();
  }
  if (scenario) FailCase(scenario->scenario, why, scenario->note);
  RC_FAIL(why);
}

void SetCase(const Scenario& scenario, const std::string& note) {
  std::lock_guard<std::mutex> lock(recorded_mu);
  pending = Recorded{scenario, "", note, nullptr, GenLimits{}};
}

void Tag(const std::vector<std::string>& tags) {
  for (const std::string& t : tags) RC_TAG(t);
}

void FailCase(const Scenario& scenario, const std::string& why, const std::string& note) {
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded = Recorded{scenario, why, note, nullptr, GenLimits{}};
    recorded_this_case = true;
  }
  RC_FAIL(why);
}

void CheckScenario(const Scenario& scenario, const GenLimits& limits, const ScenarioCheck& check) {
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    if (!pending) pending = Recorded{scenario, "", "", nullptr, limits};  // should `check` throw
  }
  std::optional<std::string> why = check(scenario);
  if (!why) return;
  {
    std::lock_guard<std::mutex> lock(recorded_mu);
    recorded = Recorded{scenario, *why, "", check, limits};
    recorded_this_case = true;
  }
  RC_FAIL(*why);
}

std::string CounterexampleDir() {
  const char* env = std::getenv("DISTCKPT_PROPERTY_OUT");
  fs::path dir =
      env != nullptr && *env ? fs::path(env) : fs::temp_directory_path() / "distckpt-property";
  fs::create_directories(dir);
  return dir.string();
}

std::string MakeWorkDir() {
  const char* env = std::getenv("DISTCKPT_PROPERTY_WORK");
  fs::path base = env != nullptr && *env          ? fs::path(env)
                  : access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                  : fs::temp_directory_path();
  fs::create_directories(base);
  std::string tmpl = (base / "distckpt-property-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr)
    Fail(ErrorKind::kIo, "cannot create a directory in {}", base.string());
  return tmpl;
}

}  // namespace distckpt
