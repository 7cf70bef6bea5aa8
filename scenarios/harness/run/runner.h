// The scenario runner: saves under topology A and loads under B, for the
// scenario's pairs or for every ordered pair of its topologies (--matrix),
// and checks every loaded element against the value generator.
//
// Ranks run as threads of this process (Backend::kThreads) or as Open MPI
// processes: each save and each load is its own `mpirun -np <world>` job of
// the distckpt binary (Backend::kMpi).
//
// Thread-safety: RunScenario is reentrant (distinct work directories).
#ifndef DISTCKPT_SCENARIO_RUNNER_H_
#define DISTCKPT_SCENARIO_RUNNER_H_

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/options.h"
#include "harness/spec/spec.h"
#include "strategy/replication.h"

namespace distckpt {

enum class Backend { kThreads, kMpi };

// Aggregated over the ranks of one save or load.
struct StepReport {
  bool ok = false;
  bool value_mismatch = false;   // loaded, but some element differs (verdict fails)
  bool other_exception = false;  // some rank failed otherwise than with a CheckpointError
  std::string error;             // first failure (agreed by every rank)
  uint64_t bytes_written = 0;    // save
  uint64_t bytes_needed = 0;     // load
  uint64_t bytes_read = 0;
  uint64_t chunks_verified = 0;
  uint64_t chunks_unverified = 0;
  double seconds = 0;
  std::string missing, unexpected;  // sorted, comma-separated (return_* modes)
  // Per rank (load): bytes read, and the size of the stored chunks they came from.
  std::vector<uint64_t> rank_bytes_read, rank_chunk_bytes;
  std::vector<uint64_t> rank_bytes_written;  // per rank (save)
  double blocking_seconds = 0;               // async save: slowest rank's blocking part
  // Load with an "fp8" section: per fp8 key, the values that saturated when
  // quantised into an fp8 request (each global element once).
  std::map<std::string, int64_t> fp8_saturated;
  nlohmann::json ToJson() const;
  static StepReport FromJson(const nlohmann::json& j);
};

// A step's options: its save and load strategies (strategy/strategy.h) and
// what the harness does around them (local checkpoint, resave, Env, device). The CLI parses its
// step flags straight into it (cli/step.cc:
// --fully-parallel, --two-stage, --exchange, --async, --writers, --local,
// --replication, --resave-dir, --device, --comm).
struct StepOptions {
  // How the save and the load spread their work. Fully parallel and
  // two-stage strategies run within the DP-with-CP group of the topology:
  // the step sets their `group` on each rank. Leave `cache` null (a cache
  // belongs to one rank; a step saves or loads once).
  SaveStrategy save;
  LoadStrategy load;
  bool async = false;  // save: SaveAsync through a queue (save.writers), finalized at once
  // A local checkpoint (engine/local_checkpoint.h, iteration 1) under this
  // root instead of the step's directory, replicated in cliques of
  // `replication` (jump J, factor F; F = 1: no copies).
  std::string local_dir;
  ReplicationParams replication;
  // Load: save the loaded state again (harness/expand/resave.h) under the load's
  // topology into this directory (a pair's "resave").
  std::string resave_dir;
  // Every file access of the step through this Env (nullptr = Env::Default()):
  // the fault campaigns' crash injection.
  Env* env = nullptr;
  // Save: replace a committed checkpoint in `dir` (SaveOptions::overwrite).
  bool overwrite = false;
  // Where the ranks' tensors live: "cpu", "cuda" (rank r on device r mod the
  // visible devices) or "cuda:N". Saves stage device tensors, loads land in
  // device tensors; values are checked after a copy back.
  std::string device = "cpu";
  // Load (fully parallel / two-stage): exchange shards over NCCL
  // (comm/nccl_communicator.h) within the DP group instead of the ranks'
  // own communicator. Needs device "cuda" and Open MPI processes.
  bool nccl = false;
};

// One rank's part of a save / a load+check. Collective over `comm`; every
// rank returns the same report (sums over ranks). `format` nullptr = native.
StepReport SaveStep(const Scenario& scenario, const PairSpec* pair, const std::string& topology,
                    const std::string& dir, Communicator& comm, const Format* format = nullptr,
                    const StepOptions& step = {});
StepReport LoadStep(const Scenario& scenario, const PairSpec* pair,
                    const std::string& saved_topology, const std::string& topology,
                    const std::string& dir, Communicator& comm, StrictHandling strict,
                    VerifyPolicy verify = VerifyPolicy::kWhenWhole, const StepOptions& step = {});

struct PairResult {
  std::string save, load;
  bool ok = false;
  std::string reason;  // why it failed, or the expected error that was seen
  StepReport save_report, load_report;
};

struct RunOptions {
  Backend backend = Backend::kThreads;
  bool matrix = false;
  std::string format = "native";         // checkpoint format of the saves (FormatByName)
  std::string work_dir;                  // checkpoints go here; empty = a fresh temp directory
  bool keep = false;                     // keep checkpoints after the run
  std::string self_exe;                  // the distckpt binary (for mpirun)
  uint64_t memory_bytes = 0;             // what the scenario may fill; 0 = physical memory
  std::string scenario_path;             // passed to the MPI jobs
  std::vector<std::string> mpirun_args;  // extra flags, e.g. --oversubscribe
  std::function<void(const std::string&)> progress;  // one line per step
  // Every step's options (the CLI's run --device / --fully-parallel /
  // --comm): saves take `save`, `async` and `device`; loads `load`,
  // `device` and `nccl`, and a pair's resave directory.
  StepOptions step;
};

// Throws CheckpointError(kInvalidArgument) before any step when, on the cpu
// device, one topology's tensors (every rank's, as its save makes them:
// StateBytes) exceed this machine's physical memory: the scenario cannot run
// here, which is not a failure of its pairs.
std::vector<PairResult> RunScenario(const Scenario& scenario, const RunOptions& options);

// The matrix table (rows = save, columns = load) and totals, for the CLI.
std::string FormatMatrix(const std::vector<std::string>& topologies,
                         const std::vector<PairResult>& results);
nlohmann::json ResultsToJson(const std::vector<PairResult>& results);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_RUNNER_H_
