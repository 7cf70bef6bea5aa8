#include "harness/run/runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/thread_world.h"
#include "core/error.h"
#include "engine/checkpoint_diff.h"
#include "format/format.h"
#include "harness/expand/expand.h"
#include "harness/run/damage.h"

extern char** environ;

namespace distckpt {
namespace {

namespace fs = std::filesystem;

std::string MakeWorkDir(const std::string& requested) {
  if (!requested.empty()) {
    fs::create_directories(requested);
    return requested;
  }
  std::string tmpl = (fs::temp_directory_path() / "distckpt-run-XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    Fail(ErrorKind::kIo, "cannot create a temporary directory in {}", tmpl);
  return tmpl;
}

std::string Sanitize(const std::string& topology) {
  std::string out;
  for (char c : topology) out += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return out;
}

// Runs one step on threads; every rank returns the same report, take rank 0's.
template <typename Fn>
StepReport OnThreads(int world, Fn&& step) {
  std::vector<StepReport> reports(world);
  std::vector<RankOutcome> outcomes =
      RunRanksCollect(world, [&](Communicator& comm) { reports[comm.rank()] = step(comm); });
  for (const RankOutcome& o : outcomes) {
    if (!o.error) continue;
    StepReport failed;
    failed.other_exception = true;
    try {
      std::rethrow_exception(o.error);
    } catch (const std::exception& e) {
      failed.error = fmt::format("rank {}: {}", o.rank, e.what());
      failed.other_exception = dynamic_cast<const CheckpointError*>(&e) == nullptr;
    }
    return failed;
  }
  return reports[0];
}

// A per-job directory for Open MPI's shared-memory segments (the vader
// BTL's backing files) and session directory: a job killed with -9 cannot
// clean them itself (they used to pile up in /dev/shm, 4 MiB each); this
// directory goes when the job ends, however it ended. Made under /dev/shm
// (tmpfs, as Open MPI's default) when it exists.
class MpiJobDir {
 public:
  MpiJobDir() {
    std::string pattern =
        (fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
        "distckpt-mpi-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~MpiJobDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  // mpirun options pointing the job's segments and session files here.
  std::vector<std::string> MpirunArgs() const {
    if (path_.empty()) return {};
    return {"--mca", "btl_vader_backing_directory", path_, "--mca", "orte_tmpdir_base", path_};
  }

 private:
  std::string path_;
};

// Runs `mpirun -np world exe args...` and reads the JSON report it writes.
StepReport OnMpi(const RunOptions& options, int world, std::vector<std::string> args,
                 const std::string& report_path) {
  const MpiJobDir job_dir;
  std::vector<std::string> argv{"mpirun"};
  const std::vector<std::string> job_args = job_dir.MpirunArgs();
  argv.insert(argv.end(), job_args.begin(), job_args.end());
  argv.insert(argv.end(), options.mpirun_args.begin(), options.mpirun_args.end());
  argv.insert(argv.end(), {"-np", std::to_string(world), options.self_exe});
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--backend", "mpi", "--report-json", report_path});
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  fs::remove(report_path);
  // The job's verdict comes back in the report file; its stdout (per-step
  // summaries) is dropped, its stderr (errors) passes through.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int spawned = posix_spawnp(&pid, "mpirun", &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) Fail(ErrorKind::kIo, "cannot start mpirun (is Open MPI installed?)");
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(report_path);
  if (!in) {
    StepReport failed;
    failed.other_exception = true;  // a crash, or an abort before the report
    failed.error = fmt::format("mpirun -np {} {} exited with status {} and wrote no report", world,
                               fmt::join(args, " "), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return failed;
  }
  return StepReport::FromJson(nlohmann::json::parse(in));
}

// The distckpt flags (cli/step.cc) that give an MPI job's save or load
// step's options: the CLI parses them back into a StepOptions.
std::vector<std::string> StepFlags(const StepOptions& step, bool load) {
  std::vector<std::string> flags{"--device", step.device};
  if (!load) {
    if (step.save.kind == SaveStrategy::Kind::kFullyParallel) flags.push_back("--fully-parallel");
    if (step.async) {
      flags.insert(flags.end(), {"--async", "--writers", std::to_string(step.save.writers)});
    }
    return flags;
  }
  switch (step.load.kind) {
    case LoadStrategy::Kind::kPlain:
      break;
    case LoadStrategy::Kind::kFullyParallel:
      flags.insert(flags.end(), {"--fully-parallel", "--exchange",
                                 std::string(ExchangeAlgorithmName(step.load.exchange))});
      break;
    case LoadStrategy::Kind::kTwoStage:
      flags.push_back("--two-stage");
      break;
  }
  if (step.nccl) flags.insert(flags.end(), {"--comm", "nccl"});
  if (!step.resave_dir.empty()) flags.insert(flags.end(), {"--resave-dir", step.resave_dir});
  return flags;
}

StepReport RunSave(const Scenario& s, const PairSpec* pair, int pair_index, const std::string& topo,
                   const std::string& dir, const RunOptions& options) {
  int world = Topology::Parse(topo).world_size();
  if (options.backend == Backend::kThreads) {
    const Format& format = FormatByName(options.format);
    return OnThreads(world, [&](Communicator& comm) {
      return SaveStep(s, pair, topo, dir, comm, &format, options.step);
    });
  }
  std::vector<std::string> args{"save",     options.scenario_path, "--topology", topo, "--dir", dir,
                                "--format", options.format};
  std::vector<std::string> flags = StepFlags(options.step, /*load=*/false);
  args.insert(args.end(), flags.begin(), flags.end());
  if (pair_index >= 0) args.insert(args.end(), {"--pair", std::to_string(pair_index)});
  return OnMpi(options, world, args, dir + ".save.json");
}

StepReport RunLoad(const Scenario& s, const PairSpec* pair, int pair_index,
                   const std::string& saved, const std::string& topo, const std::string& dir,
                   StrictHandling strict, const RunOptions& options,
                   const std::string& resave_dir = "") {
  int world = Topology::Parse(topo).world_size();
  const VerifyPolicy verify = pair ? pair->verify : VerifyPolicy::kWhenWhole;
  StepOptions step = options.step;
  step.resave_dir = resave_dir;
  if (options.backend == Backend::kThreads) {
    return OnThreads(world, [&](Communicator& comm) {
      return LoadStep(s, pair, saved, topo, dir, comm, strict, verify, step);
    });
  }
  std::vector<std::string> args{"load",
                                options.scenario_path,
                                "--topology",
                                topo,
                                "--saved-topology",
                                saved,
                                "--dir",
                                dir,
                                "--strict",
                                std::string(StrictHandlingName(strict)),
                                "--verify",
                                std::string(VerifyPolicyName(verify))};
  std::vector<std::string> flags = StepFlags(step, /*load=*/true);
  args.insert(args.end(), flags.begin(), flags.end());
  if (pair_index >= 0) args.insert(args.end(), {"--pair", std::to_string(pair_index)});
  return OnMpi(options, world, args, dir + ".load.json");
}

PairResult Judge(const PairSpec* pair, const std::string& save, const std::string& load,
                 const StepReport& saved, const StepReport& loaded) {
  PairResult r{save, load, false, "", saved, loaded};
  const std::string& error = !saved.ok ? saved.error : loaded.error;
  bool failed = !saved.ok || !loaded.ok;
  if (pair && pair->expect_loaded_or_refused && saved.ok && !loaded.ok) {
    if (loaded.value_mismatch) {
      r.reason = "loaded wrong values: " + error;
    } else if (loaded.other_exception) {
      r.reason = "failed otherwise than with a checkpoint error: " + error;
    } else {
      r.ok = true;
      r.reason = "refused: " + error;
    }
    return r;
  }
  if (pair && pair->expect_error) {
    if (!failed) {
      r.reason = fmt::format("expected an error containing '{}', but save and load succeeded",
                             *pair->expect_error);
    } else if (error.find(*pair->expect_error) == std::string::npos) {
      r.reason =
          fmt::format("expected an error containing '{}', got: {}", *pair->expect_error, error);
    } else {
      r.ok = true;
      r.reason = error;
    }
    return r;
  }
  if (failed) {
    r.reason = error;
    return r;
  }
  if (pair && pair->expect_missing && *pair->expect_missing != loaded.missing) {
    r.reason =
        fmt::format("missing keys: expected [{}], got [{}]", *pair->expect_missing, loaded.missing);
    return r;
  }
  if (pair && pair->expect_unexpected && *pair->expect_unexpected != loaded.unexpected) {
    r.reason = fmt::format("unexpected keys: expected [{}], got [{}]", *pair->expect_unexpected,
                           loaded.unexpected);
    return r;
  }
  r.ok = true;
  return r;
}

// A pair's "resave": the checkpoint saved again from the loaded state must be
// `distckpt diff`-identical to the first, and load right under resave_load.
std::optional<std::string> CheckResave(const Scenario& s, const PairSpec& pair, int pair_index,
                                       const std::string& dir, const std::string& resave_dir,
                                       const RunOptions& options) {
  const CheckpointDiff diff = DiffCheckpoints(dir, resave_dir);
  if (!diff.identical()) {
    return fmt::format(
        "the checkpoint saved again under {} differs from the first: only in the first: [{}]; "
        "only in the second: [{}]; {}",
        pair.load, fmt::join(diff.only_a, ", "), fmt::join(diff.only_b, ", "),
        fmt::join(diff.mismatches, "; "));
  }
  if (!pair.resave_load) return std::nullopt;
  StepReport again = RunLoad(s, &pair, pair_index, pair.load, *pair.resave_load, resave_dir,
                             pair.strict.value_or(s.strict), options);
  if (!again.ok)
    return fmt::format("the checkpoint saved again, loaded under {}: {}", *pair.resave_load,
                       again.error);
  return std::nullopt;
}

// Refuses a scenario whose tensors under one of `topologies` cannot fit in
// this machine's memory, whatever the backend (threads share the process;
// MPI ranks share the machine). A lower bound of what a step holds (a load
// also holds the request, and checks values): it catches a scenario sized
// for another machine before its pairs fail one by one on allocations.
void CheckFitsInMemory(const Scenario& s, const std::vector<std::string>& topologies,
                       uint64_t memory) {
  if (memory == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return;
    memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  for (const std::string& topology : topologies) {
    uint64_t bytes = 0;
    try {
      bytes = StateBytes(s, Topology::Parse(topology));
    } catch (const CheckpointError&) {
      continue;  // a topology that cannot split a tensor fails its pairs, as before
    }
    if (bytes > memory) {
      Fail(ErrorKind::kInvalidArgument,
           "scenario '{}' needs at least {} bytes ({:.1f} GiB) of tensors under topology {} "
           "(every rank's shards), more than the {} bytes ({:.1f} GiB) of this machine's memory",
           s.name, bytes, bytes / double(1 << 30), topology, memory, memory / double(1 << 30));
    }
  }
}

}  // namespace

std::vector<PairResult> RunScenario(const Scenario& s, const RunOptions& options) {
  if (options.step.device == "cpu") {
    std::vector<std::string> topologies = s.topologies;
    for (const PairSpec& pair : s.pairs)
      topologies.insert(topologies.end(), {pair.save, pair.load});
    std::sort(topologies.begin(), topologies.end());
    topologies.erase(std::unique(topologies.begin(), topologies.end()), topologies.end());
    CheckFitsInMemory(s, topologies, options.memory_bytes);
  }
  std::string work = MakeWorkDir(options.work_dir);
  auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::vector<PairResult> results;
  bool matrix = options.matrix || s.pairs.empty();
  if (matrix) {
    if (s.topologies.empty())
      Fail(ErrorKind::kInvalidArgument, "scenario '{}' lists no topologies", s.name);
    size_t total = s.topologies.size() * s.topologies.size(), done = 0;
    for (size_t i = 0; i < s.topologies.size(); ++i) {
      const std::string& a = s.topologies[i];
      std::string dir = (fs::path(work) / fmt::format("save-{}-{}", i, Sanitize(a))).string();
      StepReport saved = RunSave(s, nullptr, -1, a, dir, options);
      for (const std::string& b : s.topologies) {
        StepReport loaded;
        if (saved.ok) loaded = RunLoad(s, nullptr, -1, a, b, dir, s.strict, options);
        results.push_back(Judge(nullptr, a, b, saved, loaded));
        progress(fmt::format("[{}/{}] {} -> {}: {}", ++done, total, a, b,
                             results.back().ok ? "ok" : "FAIL: " + results.back().reason));
      }
      if (!options.keep) fs::remove_all(dir);
    }
  } else {
    for (size_t k = 0; k < s.pairs.size(); ++k) {
      const PairSpec& pair = s.pairs[k];
      std::string dir = (fs::path(work) / fmt::format("pair-{}", k)).string();
      StepReport saved = RunSave(s, &pair, static_cast<int>(k), pair.save, dir, options);
      StepReport loaded;
      if (saved.ok && pair.damage) {
        try {
          progress(fmt::format("[{}/{}] damage: {}", k + 1, s.pairs.size(),
                               ApplyDamage(*pair.damage, dir)));
        } catch (const CheckpointError& e) {
          saved.ok = false;
          saved.error = e.what();
        }
      }
      const std::string resave_dir = pair.resave ? dir + "-resaved" : "";
      if (saved.ok) {
        loaded = RunLoad(s, &pair, static_cast<int>(k), pair.save, pair.load, dir,
                         pair.strict.value_or(s.strict), options, resave_dir);
      }
      results.push_back(Judge(&pair, pair.save, pair.load, saved, loaded));
      if (pair.resave && results.back().ok && loaded.ok) {
        if (auto bad = CheckResave(s, pair, static_cast<int>(k), dir, resave_dir, options)) {
          results.back().ok = false;
          results.back().reason = *bad;
        }
      }
      progress(fmt::format("[{}/{}] {} -> {}: {}", k + 1, s.pairs.size(), pair.save, pair.load,
                           results.back().ok ? "ok" : "FAIL: " + results.back().reason));
      if (!options.keep) {
        fs::remove_all(dir);
        if (pair.resave) fs::remove_all(resave_dir);
      }
    }
  }
  if (!options.keep && options.work_dir.empty()) fs::remove_all(work);
  return results;
}

std::string FormatMatrix(const std::vector<std::string>& topologies,
                         const std::vector<PairResult>& results) {
  std::ostringstream out;
  size_t width = 14;
  for (const std::string& t : topologies) width = std::max(width, t.size() + 2);
  std::vector<std::string> reasons;
  out << fmt::format("{:<{}}", "save \\ load", width);
  for (const std::string& t : topologies) out << fmt::format("{:<{}}", t, width);
  out << "\n";
  for (const std::string& a : topologies) {
    out << fmt::format("{:<{}}", a, width);
    for (const std::string& b : topologies) {
      std::string cell = "-";
      for (const PairResult& r : results) {
        if (r.save != a || r.load != b) continue;
        if (r.ok) {
          cell = "ok";
        } else {
          reasons.push_back(r.reason);
          cell = fmt::format("FAIL[{}]", reasons.size());
        }
      }
      out << fmt::format("{:<{}}", cell, width);
    }
    out << "\n";
  }
  for (size_t i = 0; i < reasons.size(); ++i) out << fmt::format("[{}] {}\n", i + 1, reasons[i]);
  return out.str();
}

nlohmann::json ResultsToJson(const std::vector<PairResult>& results) {
  nlohmann::json out = nlohmann::json::array();
  for (const PairResult& r : results) {
    out.push_back({{"save", r.save},
                   {"load", r.load},
                   {"verdict", r.ok ? "ok" : "FAIL"},
                   {"reason", r.reason},
                   {"bytes_written", r.save_report.bytes_written},
                   {"bytes_needed", r.load_report.bytes_needed},
                   {"bytes_read", r.load_report.bytes_read},
                   {"fp8_saturated", r.load_report.fp8_saturated},
                   {"save_seconds", r.save_report.seconds},
                   {"load_seconds", r.load_report.seconds}});
  }
  return out;
}

}  // namespace distckpt
