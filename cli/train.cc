// distckpt train / distckpt manage: the simulated training loop over the
// checkpoint manager, and offline views of a run's checkpoint root.
#include "harness/train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "format/format.h"
#include "io/file_lock.h"
#include "manager/layout.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

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
// reads it at every step and the ranks agree on it (harness/train.h).
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

}  // namespace

namespace {

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
void RefuseRootWithCheckpoints(Env* env, const std::string& root, CheckpointLayout layout) {
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
       "auto|N|PATH to continue from them, or choose another --dir (nothing was changed)",
       root, fmt::join(held, ", "));
}

}  // namespace

int TrainCommand(const TrainArgs& args) {
  // First: a signal from here on is a request to save and stop (before it,
  // during process start and argument parsing, it has its default action).
  if (!args.save_on_signal.empty()) InstallStopHandlers(args.save_on_signal);
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
      if (args.resume.empty()) RefuseRootWithCheckpoints(Env::Default(), args.dir, m.layout);
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
  if (report.stop_signal != 0) {
    std::cout << fmt::format(
        "stopped at step {} on signal {} ({}): saved and finalized\n", report.last_step,
        fmt::format("SIG{}", ::sigabbrev_np(report.stop_signal)), report.stop_signal);
  }
  return kExitOk;
}

int ManageCommand(const ManageArgs& args) {
  Env* env = Env::Default();
  CheckpointLayout layout = ParseCheckpointLayout(args.layout);
  Catalog catalog = ScanRoot(env, args.dir, layout);
  if (args.action == "prune") {
    if (!catalog.tracker || catalog.tracker->release) {
      Fail(ErrorKind::kInvalidArgument, "{}: no tracker iteration: nothing is superseded",
           args.dir);
    }
    const int64_t committed = catalog.tracker->iteration;
    const CatalogEntry* current = catalog.Find(committed);
    if (!current || !current->complete) {
      Fail(ErrorKind::kIncomplete, "{}: the tracker names iteration {}, which is not complete",
           args.dir, committed);
    }
    std::vector<int64_t> candidates;
    for (const CatalogEntry& e : catalog.entries) {
      if (e.complete && (!e.foreign || args.include_foreign)) candidates.push_back(e.iteration);
    }
    for (int64_t it :
         SupersededIterations({args.keep, args.retain_interval}, candidates, committed)) {
      if (it == committed) continue;
      DeleteIterationDir(env, catalog.Find(it)->path);
      std::cout << "deleted " << catalog.Find(it)->path << "\n";
    }
    for (const CatalogEntry& e : catalog.entries) {
      if (e.complete && e.foreign && !args.include_foreign && e.iteration != committed)
        std::cout << "kept " << e.path << " (not written by distckpt; --include-foreign deletes "
                  << "it when superseded)\n";
    }
    return kExitOk;
  }
  if (args.action != "list")
    Fail(ErrorKind::kInvalidArgument, "manage: unknown action '{}'", args.action);
  if (args.json) {
    nlohmann::json j;
    j["tracker"] = catalog.tracker ? nlohmann::json(catalog.tracker->ToString()) : nullptr;
    if (!catalog.tracker_error.empty()) j["tracker_error"] = catalog.tracker_error;
    j["checkpoints"] = nlohmann::json::array();
    for (const CatalogEntry& e : catalog.entries) {
      nlohmann::json c = {{"iteration", e.iteration},
                          {"path", e.path},
                          {"complete", e.complete},
                          {"writer", e.foreign ? "other" : "distckpt"}};
      if (!e.format.empty()) c["format"] = e.format;
      if (!e.complete) c["why"] = e.why_incomplete;
      if (e.manifest) c["manifest"] = e.manifest->ToJson();
      j["checkpoints"].push_back(c);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("tracker: {}\n", catalog.tracker ? catalog.tracker->ToString()
                                              : catalog.tracker_error.empty()
                                                  ? "none"
                                                  : "UNREADABLE: " + catalog.tracker_error);
    for (const CatalogEntry& e : catalog.entries) {
      std::cout << fmt::format(
          "  {:>10}  {}  {}\n", e.iteration, e.complete ? "complete  " : "INCOMPLETE",
          !e.complete ? e.path + ": " + e.why_incomplete
          : e.foreign ? fmt::format("{} ({} checkpoint not written by distckpt)", e.path, e.format)
                      : fmt::format("{} [{}] under {}", e.path,
                                    fmt::join(e.manifest->contents, ","), e.manifest->topology));
    }
  }
  if (!catalog.tracker_error.empty()) return kExitInputError;
  if (catalog.tracker && !catalog.tracker->release) {
    const CatalogEntry* current = catalog.Find(catalog.tracker->iteration);
    if (!current || !current->complete) {
      std::cerr << "distckpt manage: the tracker names iteration " << catalog.tracker->iteration
                << ", which is not a complete checkpoint\n";
      return kExitVerdictFailed;
    }
  }
  if (catalog.tracker && catalog.tracker->release &&
      !env->IsDirectory(JoinPath(args.dir, kReleaseDir))) {  // as resume refuses it
    std::cerr << "distckpt manage: the tracker says 'release' but "
              << JoinPath(args.dir, kReleaseDir) << " is missing\n";
    return kExitVerdictFailed;
  }
  return kExitOk;
}

}  // namespace distckpt
