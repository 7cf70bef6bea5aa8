#include "cli/commands.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/default_scenario.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "format/format.h"
#include "topology/topology.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace distckpt {
namespace {

namespace fs = std::filesystem;

const PairSpec* PairAt(const Scenario& s, int index) {
  if (index < 0) return nullptr;
  if (index >= static_cast<int>(s.pairs.size())) {
    Fail(ErrorKind::kInvalidArgument, "scenario '{}' has {} pairs; --pair {} is out of range",
         s.name, s.pairs.size(), index);
  }
  return &s.pairs[index];
}

struct RankReport {
  StepReport report;   // the same on every rank
  bool prints = true;  // rank 0 prints and writes the report file
};

// Runs `step` on every rank of the chosen backend: rank 0's report, and
// whether this process holds rank 0 (under mpi, each process its own).
template <typename Step>
RankReport OnRanks(const std::string& backend, int world, Step&& step) {
  RankReport result;
  const bool threads = backend == "threads";
  RunOnBackend(backend, world, [&](Communicator& comm) {
    StepReport report = step(comm);
    if (comm.rank() == 0 || !threads) result = {std::move(report), comm.rank() == 0};
  });
  return result;
}

void WriteReport(const std::string& path, const StepReport& report) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << report.ToJson().dump(2) << "\n";
  if (!out) Fail(ErrorKind::kIo, "cannot write report {}", path);
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "distckpt" : p.string();
}

std::string Ratio(uint64_t a, uint64_t b) {
  return b ? fmt::format("{:.3f}", double(a) / double(b)) : "-";
}

// --device and --comm: a device this machine has, and NCCL only where it
// has work (a fully parallel or two-stage load on CUDA tensors).
void CheckDeviceStrategy(const StepStrategy& strategy) {
  CheckDeviceUsable(strategy.device == "cuda" ? Device::Cuda() : Device::Parse(strategy.device));
  if (!strategy.nccl) return;
  if (strategy.device == "cpu") {
    Fail(ErrorKind::kInvalidArgument, "--comm nccl needs --device cuda");
  }
  if (strategy.load.kind == LoadStrategy::Kind::kPlain) {
    Fail(ErrorKind::kInvalidArgument,
         "--comm nccl carries the exchange of --fully-parallel or --two-stage loads");
  }
}

// What the flags alone cannot check: the device, and a directory to use.
void CheckStepArgs(const StepArgs& args) {
  CheckDeviceStrategy(args.strategy);
  if (args.dir.empty() && args.strategy.local_dir.empty()) {
    Fail(ErrorKind::kInvalidArgument, "--dir is required (or --local DIR for a local checkpoint)");
  }
}

// Per-rank bytes of a fully parallel or async save, and how even they are.
void PrintRankBytesWritten(const StepReport& report, bool async) {
  uint64_t busiest = 0;
  for (size_t r = 0; r < report.rank_bytes_written.size(); ++r) {
    busiest = std::max(busiest, report.rank_bytes_written[r]);
    std::cout << fmt::format("  rank {}: wrote {} bytes\n", r, report.rank_bytes_written[r]);
  }
  std::cout << fmt::format(
      "  busiest rank: {} bytes of {} ({:.3f} of the total)\n", busiest, report.bytes_written,
      report.bytes_written ? double(busiest) / double(report.bytes_written) : 0.0);
  if (async)
    std::cout << fmt::format("  blocking part (staging): {:.3f} s\n", report.blocking_seconds);
}

}  // namespace

void RunOnBackend(const std::string& backend, int world,
                  const std::function<void(Communicator&)>& fn) {
  if (backend == "threads") {
    RunRanks(world, fn);
    return;
  }
  if (backend != "mpi")
    Fail(ErrorKind::kInvalidArgument, "unknown backend '{}' (threads or mpi)", backend);
#ifdef DISTCKPT_HAVE_MPI
  std::unique_ptr<Communicator> comm = MpiWorld();
  if (comm->size() != world) {
    Fail(ErrorKind::kInvalidArgument, "the topology needs {} ranks but mpirun started {}", world,
         comm->size());
  }
  fn(*comm);
#else
  Fail(ErrorKind::kUnsupported, "this distckpt was built without MPI");
#endif
}

Scenario LoadScenario(const std::string& path) {
  if (!path.empty()) return Scenario::FromFile(path);
  return Scenario::FromJson(nlohmann::json::parse(kDefaultScenarioJson, nullptr, true, true),
                            "<embedded default scenario>");
}

int SaveCommand(const StepArgs& args) {
  CheckStepArgs(args);
  const StepStrategy& strategy = args.strategy;
  Scenario s = LoadScenario(args.scenario);
  const PairSpec* pair = PairAt(s, args.pair);
  int world = Topology::Parse(args.topology).world_size();
  const Format& format = FormatByName(args.format);
  auto [report, prints] = OnRanks(args.backend, world, [&](Communicator& comm) {
    return SaveStep(s, pair, args.topology, args.dir, comm, &format, strategy);
  });
  if (prints) {
    WriteReport(args.report_json, report);
    if (!report.ok)
      std::cerr << "distckpt save: " << report.error << "\n";
    else
      std::cout << fmt::format(
          "saved {} under {} to {}: {} bytes written in {:.3f} s\n", s.name, args.topology,
          strategy.local_dir.empty() ? args.dir : strategy.local_dir + " (local)",
          report.bytes_written, report.seconds);
    if (report.ok && (strategy.save.kind != SaveStrategy::Kind::kPlain || strategy.async))
      PrintRankBytesWritten(report, strategy.async);
  }
  return report.ok ? kExitOk : kExitInputError;
}

int LoadCommand(const StepArgs& args) {
  CheckStepArgs(args);
  const StepStrategy& strategy = args.strategy;
  Scenario s = LoadScenario(args.scenario);
  const PairSpec* pair = PairAt(s, args.pair);
  std::string saved = args.saved_topology;
  if (saved.empty() && !strategy.local_dir.empty()) saved = args.topology;  // local: as loaded
  if (saved.empty()) {
    Env* env = Env::Default();
    saved = DetectFormat(env, args.dir).OpenReader(env, args.dir)->metadata().topology;
    if (saved.empty()) {
      Fail(ErrorKind::kInvalidArgument, "{} records no topology; pass --saved-topology", args.dir);
    }
  }
  StrictHandling strict = args.strict.empty() ? (pair && pair->strict ? *pair->strict : s.strict)
                                              : ParseStrictHandling(args.strict);
  VerifyPolicy verify = args.verify.empty() ? (pair ? pair->verify : VerifyPolicy::kWhenWhole)
                                            : ParseVerifyPolicy(args.verify);
  int world = Topology::Parse(args.topology).world_size();
  auto [report, prints] = OnRanks(args.backend, world, [&](Communicator& comm) {
    return LoadStep(s, pair, saved, args.topology, args.dir, comm, strict, verify, strategy);
  });
  int code = report.ok ? kExitOk : report.value_mismatch ? kExitVerdictFailed : kExitInputError;
  if (!prints) return code;
  WriteReport(args.report_json, report);
  if (!report.ok) {
    std::cerr << "distckpt load: " << report.error << "\n";
    if (report.value_mismatch && report.chunks_unverified > 0) {
      std::cerr << fmt::format(
          "distckpt load: note: {} stored chunks were read partially, so their checksums were "
          "not verified; --verify always reads them whole to check for corruption\n",
          report.chunks_unverified);
    }
    return code;
  }
  std::cout << fmt::format(
      "loaded {} (saved under {}) under {}: every element matches\n"
      "  bytes needed {}, bytes read {} (read/needed {}), chunks verified {}, partially read {}, "
      "{:.3f} s\n",
      s.name, saved, args.topology, report.bytes_needed, report.bytes_read,
      Ratio(report.bytes_read, report.bytes_needed), report.chunks_verified,
      report.chunks_unverified, report.seconds);
  for (size_t r = 0; r < report.rank_bytes_read.size(); ++r) {
    std::cout << fmt::format(
        "  rank {}: read {} bytes of the {} bytes of stored chunks it touched ({})\n", r,
        report.rank_bytes_read[r], report.rank_chunk_bytes[r],
        Ratio(report.rank_bytes_read[r], report.rank_chunk_bytes[r]));
  }
  for (const auto& [key, count] : report.fp8_saturated) {
    std::cout << fmt::format("  fp8 '{}': {} values saturated\n", key, count);
  }
  return code;
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
  options.strategy = args.strategy;
  CheckDeviceStrategy(options.strategy);
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
  const std::string& device = args.strategy.device;
  const bool fully_parallel = args.strategy.load.kind == LoadStrategy::Kind::kFullyParallel;
  const bool nccl = args.strategy.nccl;
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

}  // namespace distckpt
