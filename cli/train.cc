// distckpt train: the simulated training loop over the checkpoint manager.
#include "harness/tools/train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "format/format.h"
#include "io/file_lock.h"  // internal: the writer lock's name, to name its holder
#include "io/storage_path.h"
#include "manager/layout.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

struct TrainArgs {
  std::string scenario;
  std::string dir;
  std::string layout = "megatron";
  std::string topology = "tp=1";
  std::string backend = "threads";
  std::string format = "native";
  std::string resume;                // "" = start from scratch
  std::string components = "actor";  // verl
  std::string save_contents = "model,optimizer,extra";
  std::string load_contents = "model,optimizer,extra";
  int64_t steps = 0;
  int64_t save_interval = 1;
  int keep = 0;
  int64_t retain_interval = 0;
  bool async = false;
  int writers = 1;
  int step_ms = 0;
  bool verbose = false;
  int64_t non_persistent_save_interval = 0;  // 0 = none (ROOT/non_persistent/)
  std::string save_on_signal;                // "SIGTERM,SIGUSR1": save, finalize, exit 0
  std::string upload;                        // remote root each commit is copied to
};

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// DISTCKPT_CRASH_AT=PHASE:N[:RANK] (crash tests only): the process of RANK
// (any rank if omitted) kills itself with SIGKILL the N-th time it reaches
// manager phase PHASE (ManagerOptions::on_phase). Counting is per process.
struct CrashPoint {
  std::string phase;
  int count = 0;
  int rank = -1;
  std::atomic<int> seen{0};
};

std::unique_ptr<CrashPoint> CrashPointFromEnv() {
  const char* spec = std::getenv("DISTCKPT_CRASH_AT");
  if (!spec || !*spec) return nullptr;
  std::vector<std::string> parts;
  std::stringstream in(spec);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.size() < 2 || parts.size() > 3) {
    Fail(ErrorKind::kInvalidArgument, "DISTCKPT_CRASH_AT='{}': expected PHASE:N[:RANK]", spec);
  }
  auto point = std::make_unique<CrashPoint>();
  point->phase = parts[0];
  point->count = std::stoi(parts[1]);
  if (parts.size() == 3) point->rank = std::stoi(parts[2]);
  return point;
}

// --save-on-signal: the handler only records the signal; the training loop
// reads it at every step and the ranks agree on it (harness/tools/train.h).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void RecordStopSignal(int signo) { g_stop_signal = signo; }

int SignalByName(const std::string& text) {
  static const std::pair<const char*, int> kSignals[] = {{"TERM", SIGTERM}, {"INT", SIGINT},
                                                         {"HUP", SIGHUP},   {"USR1", SIGUSR1},
                                                         {"USR2", SIGUSR2}, {"QUIT", SIGQUIT}};
  std::string name = text;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [n, signo] : kSignals) {
    if (name == n) return signo;
  }
  Fail(ErrorKind::kInvalidArgument,
       "--save-on-signal: unknown signal '{}' (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT)",
       text);
}

// Installs the recording handler for every signal in `list` (comma-separated).
std::vector<int> InstallStopHandlers(const std::string& list) {
  std::vector<int> signals;
  for (const std::string& name : SplitList(list)) signals.push_back(SignalByName(name));
  if (signals.empty()) Fail(ErrorKind::kInvalidArgument, "--save-on-signal: no signal named");
  struct sigaction action {};
  action.sa_handler = RecordStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // file and socket calls resume; the flag is read per step
  for (int signo : signals) {
    if (::sigaction(signo, &action, nullptr) != 0)
      Fail(ErrorKind::kIo, "--save-on-signal: sigaction({}) failed", signo);
  }
  return signals;
}

// A second run on a root another run is writing is refused before anything
// else, naming the holder of the root's writer lock (manager/manager.h).
void RefuseRootHeld(const std::string& root) {
  const std::string lock = JoinPath(root, kWriterLockFile);
  if (std::optional<std::string> holder = Env::Default()->LockHolder(lock)) {
    Fail(ErrorKind::kInvalidArgument,
         "{} is being written by another run ({}, lock {}); one writer per checkpoint root: "
         "wait for it, or choose another --dir (nothing was changed)",
         root, *holder, lock);
  }
}

// A run that starts from scratch must not write into a root that already
// holds checkpoints: its saves would supersede them and retention would
// delete them. Refused, naming what is there, unless the run resumes.
void RefuseRootWithCheckpoints(Env* env, const std::string& root, CheckpointLayout layout,
                               std::string_view option = "--dir") {
  Catalog catalog = ScanRoot(env, root, layout);
  std::vector<std::string> held;
  if (catalog.tracker) held.push_back(fmt::format("tracker {}", catalog.tracker->ToString()));
  if (!catalog.tracker_error.empty()) held.push_back("an unreadable tracker");
  for (const CatalogEntry& e : catalog.entries) {
    if (e.complete) {
      held.push_back(
          fmt::format("{} (complete{})", e.path, e.foreign ? ", not written by distckpt" : ""));
    } else if (e.foreign) {
      held.push_back(fmt::format("{} (not written by distckpt)", e.path));
    }
  }
  if (held.empty()) return;
  Fail(ErrorKind::kInvalidArgument,
       "{} already holds {}; a run without --resume would replace them: pass --resume "
       "auto|N|PATH to continue from them, or choose another {} (nothing was changed)",
       root, fmt::join(held, ", "), option);
}

// The simulated training loop over the checkpoint manager (harness/tools/train.h).
int TrainCommand(const TrainArgs& args) {
  // First: a signal from here on is a request to save and stop (before it,
  // during process start and argument parsing, it has its default action).
  if (!args.save_on_signal.empty()) InstallStopHandlers(args.save_on_signal);
  if (args.dir.starts_with("s3://")) {
    Fail(ErrorKind::kUnsupported,
         "--dir {}: a training run's root needs a lock and atomic renames, which an object store "
         "has not; save locally and upload each checkpoint: --dir LOCAL --upload {}",
         args.dir, args.dir);
  }
  Scenario s = LoadScenario(args.scenario);
  TrainOptions options;
  ManagerOptions& m = options.manager;
  m.root = args.dir;
  m.layout = ParseCheckpointLayout(args.layout);
  m.components = SplitList(args.components);
  m.save_contents = SplitList(args.save_contents);
  m.retention.keep_last = args.keep;
  m.retention.retain_interval = args.retain_interval;
  m.async = args.async;
  m.topology = Topology::Parse(args.topology).ToString();
  m.save.format = &FormatByName(args.format);
  m.save.strategy.writers = args.writers;
  options.steps = args.steps;
  options.save_interval = args.save_interval;
  options.resume = args.resume;
  options.load_contents = SplitList(args.load_contents);
  options.step_ms = args.step_ms;
  options.non_persistent_interval = args.non_persistent_save_interval;
  if (!args.upload.empty()) {
    StoragePath where = EnvForPath(args.upload);
    m.upload.env = where.env;
    m.upload.root = where.path;
    while (m.upload.root.size() > 1 && m.upload.root.back() == '/') m.upload.root.pop_back();
    if (where.env == PosixStorage() && m.upload.root == args.dir) {
      Fail(ErrorKind::kInvalidArgument, "--upload {} is the run's own --dir", args.upload);
    }
  }
  if (!args.save_on_signal.empty())
    options.stop_requested = [] { return static_cast<int>(g_stop_signal); };
  std::unique_ptr<CrashPoint> crash = CrashPointFromEnv();
  const int world = Topology::Parse(args.topology).world_size();
  TrainReport report;
  bool prints = false;
  RunOnBackend(args.backend, world, [&](Communicator& comm) {
    TrainOptions mine = options;
    const int rank = comm.rank();
    // Rank 0 alone looks (MPI ranks probing the writer lock at once would see
    // each other's probe), and every rank gets its verdict.
    AgreeOnOutcome(comm, [&] {
      if (rank != 0) return;
      RefuseRootHeld(args.dir);
      if (args.resume.empty()) {
        RefuseRootWithCheckpoints(Env::Default(), args.dir, m.layout);
        if (m.upload.env)
          RefuseRootWithCheckpoints(m.upload.env, m.upload.root, m.layout, "--upload");
      }
    });
    if (rank == 0) {
      mine.log = [](const std::string& line) { std::cout << line << std::endl; };
    }
    mine.manager.on_phase = [&, rank](std::string_view phase, int64_t iteration) {
      if (args.verbose && rank == 0)
        std::cout << "phase " << phase << " " << iteration << std::endl;
      if (crash && phase == crash->phase && (crash->rank < 0 || crash->rank == rank) &&
          ++crash->seen == crash->count) {
        std::cout << fmt::format("crash point {} (iteration {}) on rank {}: SIGKILL", phase,
                                 iteration, rank)
                  << std::endl;
        ::kill(::getpid(), SIGKILL);
      }
    };
    TrainReport r = TrainLoop(s, mine, comm);
    if (rank == 0) {
      report = std::move(r);
      prints = true;
    }
  });
  if (!prints) return report.error.empty() ? kExitOk : kExitInputError;
  if (!report.error.empty()) {
    std::cerr << "distckpt train: " << report.error << "\n";
    return report.value_mismatch ? kExitVerdictFailed : kExitInputError;
  }
  if (report.resumed_foreign) {
    std::cout << fmt::format("resumed iteration {} under {} (loaded as above); nothing to train\n",
                             report.resumed_iteration, m.topology);
    return kExitOk;
  }
  std::cout << fmt::format(
      "trained {} to step {} under {} ({} layout){}; committed: {}{}\n", s.name, report.last_step,
      m.topology, args.layout,
      report.resumed ? fmt::format(", resumed iteration {}{}", report.resumed_iteration,
                                   report.resumed_non_persistent ? " (non-persistent)" : "")
                     : "",
      fmt::join(report.committed, " "),
      report.committed_non_persistent.empty()
          ? ""
          : fmt::format("; non-persistent: {}", fmt::join(report.committed_non_persistent, " ")));
  if (m.upload.env) {
    std::cout << fmt::format("uploaded to {}: {}\n", args.upload,
                             report.uploaded.empty()
                                 ? std::string("none")
                                 : fmt::format("{}", fmt::join(report.uploaded, " ")));
  }
  if (report.stop_signal != 0) {
    std::cout << fmt::format(
        "stopped at step {} on signal {} ({}): saved and finalized\n", report.last_step,
        fmt::format("SIG{}", ::sigabbrev_np(report.stop_signal)), report.stop_signal);
  }
  return kExitOk;
}

}  // namespace

Command AddTrainCommand(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train", "a simulated training loop checkpointed through the checkpoint manager");
  train->add_option("scenario", args->scenario, "scenario file (default: embedded)");
  train->add_option("--dir,-d", args->dir, "checkpoint root of the run")->required();
  train->add_option("--layout", args->layout, "megatron (iter_0000100/) or verl (global_step_100/)")
      ->check(CLI::IsMember({"megatron", "verl"}));
  train->add_option("--topology,-t", args->topology, "topology of this run");
  train->add_option("--steps", args->steps, "train up to this step")->required();
  train->add_option("--save-interval", args->save_interval, "save every K steps");
  train->add_option("--keep", args->keep, "keep the last K checkpoints (0 = all)");
  train->add_option("--retain-interval", args->retain_interval,
                    "also keep every multiple of R (Megatron's --save-retain-interval)");
  train->add_flag("--async", args->async, "asynchronous saves (tracker in the finalize)");
  train->add_option("--writers", args->writers, "async writer threads per rank");
  train->add_option("--resume", args->resume,
                    "auto (the tracker), a checkpoint path, or an iteration");
  train->add_option("--backend", args->backend, "threads or mpi")
      ->check(CLI::IsMember({"threads", "mpi"}));
  train->add_option("--format", args->format, "native or dcp");
  train->add_option("--components", args->components, "verl: component folders, e.g. actor,critic");
  train->add_option("--save-contents", args->save_contents, "model,optimizer,extra (any subset)");
  train->add_option("--load-contents", args->load_contents,
                    "contents loaded and checked on resume");
  train->add_option("--step-ms", args->step_ms, "simulated compute per step (ms)");
  train->add_option("--non-persistent-save-interval", args->non_persistent_save_interval,
                    "also save every K steps into DIR/non_persistent/ (only the newest kept)");
  train->add_option("--save-on-signal", args->save_on_signal,
                    "on these signals (SIGTERM,SIGUSR1,...): save the step reached, finalize, "
                    "exit 0");
  train->add_option("--upload", args->upload,
                    "also copy each committed checkpoint to this root (s3://bucket/prefix or a "
                    "path): data, metadata, then its tracker; --resume auto takes it when newer");
  train->add_flag("--verbose", args->verbose, "print every manager phase");
  return {train, [args](CommandLine& line) {
            // No relaunch: `train --backend mpi` runs inside mpirun.
            return OnBackend(line, args->backend, nullptr, [&] { return TrainCommand(*args); });
          }};
}

}  // namespace distckpt
