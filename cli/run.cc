// distckpt run: save under A, load under B, for a scenario's pairs or its
// topology matrix (harness/run/runner.h).
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/default_scenario.h"
#include "cli/options.h"
#include "cli/report.h"
#include "core/error.h"
#include "format/format.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

struct RunArgs {
  std::string scenario;
  bool matrix = false;
  std::string backend = "threads";
  std::string format = "native";
  std::string report;
  std::string work_dir;
  bool keep = false;
  std::string junit, markdown;  // CI reports (cli/report.h); `report` is the JSON one
  // Every step's: --device, --fully-parallel (saves and loads), --comm (loads).
  StepOptions step;
};

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "distckpt" : p.string();
}

int RunCommand(const RunArgs& args) {
  Scenario s = LoadScenario(args.scenario);
  FormatByName(args.format);  // an unknown name is a usage error before any step runs
  RunOptions options;
  options.format = args.format;
  options.matrix = args.matrix;
  options.work_dir = args.work_dir;
  options.keep = args.keep;
  options.self_exe = SelfExe();
  options.progress = [](const std::string& line) { std::cerr << line << std::endl; };
  options.step = args.step;
  CheckStepDevice(options.step);
  std::string embedded_copy;
  if (args.backend == "mpi") {
    options.backend = Backend::kMpi;
    options.mpirun_args = {"--oversubscribe"};
    if (geteuid() == 0) options.mpirun_args.push_back("--allow-run-as-root");
    options.scenario_path = args.scenario;
    if (args.scenario.empty()) {  // the MPI jobs need the embedded scenario as a file
      embedded_copy =
          (fs::temp_directory_path() / fmt::format("distckpt-default-{}.json", getpid())).string();
      std::ofstream(embedded_copy) << kDefaultScenarioJson;
      options.scenario_path = embedded_copy;
    }
  } else if (args.backend != "threads") {
    Fail(ErrorKind::kInvalidArgument, "unknown backend '{}' (threads or mpi)", args.backend);
  }
  std::vector<PairResult> results = RunScenario(s, options);
  if (!embedded_copy.empty()) fs::remove(embedded_copy);

  bool matrix = args.matrix || s.pairs.empty();
  size_t passed = 0;
  for (const PairResult& r : results) passed += r.ok;
  const std::string& device = args.step.device;
  const bool fully_parallel = args.step.load.kind == LoadStrategy::Kind::kFullyParallel;
  const bool nccl = args.step.nccl;
  std::cout << fmt::format("scenario {} ({} backend{}{}{})\n", s.name, args.backend,
                           device == "cpu" ? "" : ", device " + device,
                           fully_parallel ? ", fully parallel" : "", nccl ? ", NCCL exchange" : "");
  if (matrix) {
    std::cout << FormatMatrix(s.topologies, results);
  } else {
    for (const PairResult& r : results) {
      std::cout << fmt::format(
          "  {:<28} -> {:<28} {}{}\n", r.save, r.load, r.ok ? "ok" : "FAIL",
          r.reason.empty() ? "" : (r.ok ? "  (expected: " : "  ") + r.reason + (r.ok ? ")" : ""));
    }
  }
  uint64_t needed = 0, read = 0;
  for (const PairResult& r : results) {
    needed += r.load_report.bytes_needed;
    read += r.load_report.bytes_read;
  }
  std::cout << fmt::format("bytes read / needed over all loads: {} / {} ({})\n", read, needed,
                           Ratio(read, needed));
  // The load that read the most beyond what it needed, by ratio: a matrix's
  // total can hide one pair that pays several times its bytes.
  const PairResult* worst = nullptr;
  double worst_ratio = 0;
  for (const PairResult& r : results) {
    const StepReport& l = r.load_report;
    if (l.bytes_needed == 0) continue;
    const double ratio = static_cast<double>(l.bytes_read) / static_cast<double>(l.bytes_needed);
    if (!worst || ratio > worst_ratio) worst = &r, worst_ratio = ratio;
  }
  if (worst) {
    std::cout << fmt::format("most read / needed of one load: {} -> {}: {} / {} ({})\n",
                             worst->save, worst->load, worst->load_report.bytes_read,
                             worst->load_report.bytes_needed,
                             Ratio(worst->load_report.bytes_read, worst->load_report.bytes_needed));
  }
  std::cout << fmt::format("pairs: {} passed, {} failed\n", passed, results.size() - passed);
  Report report;
  report.command = "run";
  report.title = fmt::format("scenario {} ({} backend, {} format{})", s.name, args.backend,
                             args.format, matrix ? ", matrix" : "");
  // The JSON report keeps its fields (scenario, backend, pairs) and gains the cases.
  report.extra = {{"scenario", s.name},
                  {"backend", args.backend},
                  {"device", device},
                  {"fully_parallel", fully_parallel},
                  {"comm", nccl ? "nccl" : "default"},
                  {"pairs", ResultsToJson(results)}};
  for (const PairResult& r : results) {
    report.cases.push_back({"distckpt.run." + s.name, r.save + " -> " + r.load, r.ok, r.reason,
                            r.save_report.seconds + r.load_report.seconds, nullptr});
  }
  WriteReports({args.report, args.junit, args.markdown}, report);
  return passed == results.size() ? kExitOk : kExitVerdictFailed;
}

}  // namespace

Command AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", "save under A, load under B, for a scenario's pairs or its topology matrix");
  run->add_option("scenario", args->scenario,
                  "scenario file (default: the embedded default scenario)");
  run->add_flag("--matrix", args->matrix, "every ordered pair of the scenario's topologies");
  run->add_option("--backend", args->backend, "threads or mpi")
      ->check(CLI::IsMember({"threads", "mpi"}));
  run->add_option("--format", args->format, "native or dcp (also dcp-1.13, fsdp-dtensor)");
  run->add_option("--report", args->report, "write a JSON report per pair here");
  run->add_option("--work-dir", args->work_dir,
                  "where checkpoints are written (default: a temp dir)");
  run->add_flag("--keep", args->keep, "keep the checkpoints");
  run->add_option("--device", args->step.device,
                  "where the ranks' tensors live: cpu, cuda (rank r on device r mod the "
                  "devices) or cuda:N");
  run->add_flag_callback(
      "--fully-parallel",
      [args] {
        args->step.save.kind = SaveStrategy::Kind::kFullyParallel;
        args->step.load.kind = LoadStrategy::Kind::kFullyParallel;
      },
      "every save and load fully parallel within the DP groups");
  AddCommOption(run, args->step,
                "the loads' exchange: default or nccl (--device cuda --fully-parallel, "
                "--backend mpi)");
  run->add_option("--junit", args->junit, "write a JUnit XML report (one testcase per pair)");
  run->add_option("--markdown", args->markdown, "write a Markdown report (a table per pair)");
  return {run, [args](CommandLine&) { return RunCommand(*args); }};
}

}  // namespace distckpt
