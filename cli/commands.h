// The distckpt commands. Each returns the process exit code:
// 0 = the verdict holds, 1 = the verdict fails (a value differs, a matrix
// cell fails), 2 = usage or input error (bad scenario, topology, checkpoint).
#ifndef DISTCKPT_CLI_COMMANDS_H_
#define DISTCKPT_CLI_COMMANDS_H_

#include <functional>
#include <optional>
#include <string>

#include "cli/report.h"
#include "comm/communicator.h"
#include "engine/checkpoint_diff.h"
#include "harness/runner.h"

namespace distckpt {

constexpr int kExitOk = 0;
constexpr int kExitVerdictFailed = 1;
constexpr int kExitInputError = 2;

struct StepArgs {
  std::string scenario;  // path, or "" for the embedded default
  std::string topology;
  std::string saved_topology;  // load: defaults to the checkpoint's recorded topology
  std::string dir;
  std::string backend = "threads";
  std::string format = "native";  // save: checkpoint format (load detects it)
  std::string strict;             // load: default = the scenario's
  std::string verify;             // load: whole | always | never (default: the pair's, else whole)
  std::string report_json;
  int pair = -1;  // scenario pair whose extras apply
  // The step's strategies and what the harness does around them
  // (harness/runner.h: --fully-parallel, --async, --local, --device, ...).
  StepStrategy strategy;
};

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
  StepStrategy strategy;
};

struct VerifyArgs {
  std::string dir;
  std::vector<std::string> topologies;  // one verdict (report case) each
  std::string spec;                     // a spec / scenario file, or "gpt"
  std::vector<std::string> sets;        // --set field=value (--spec gpt)
  std::string strict;                   // default: the spec's
  std::string saved_topology;
  bool data = false;  // also read every byte and check every checksum
  // With data: a chunk, object or metadata.json that carries no checksum
  // fails the data verdict (exit 1) instead of being reported as unverified.
  bool require_checksums = false;
  bool strict_objects = false;  // an object the topology drops or re-grids fails the verdict
  ReportPaths reports;
};

struct ReshardArgs {
  std::string dir, topology, spec, out;
  std::vector<std::string> sets;
  std::string format;  // "" = the source's format (dcp-common-pt when it has common.pt)
  std::string backend = "threads";
  std::string strict;
  bool strict_objects = false;  // refuse when a stored object would not be carried
  int world_size = 0;           // > 0: a verl FSDP checkpoint to N ranks (ReshardVerlCommand)
  int fsdp_version = 0;         // with world_size: 1 or 2, 0 = the source's
};

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
};

struct ManageArgs {
  std::string action;  // list | prune
  std::string dir;
  std::string layout = "megatron";
  bool json = false;
  int keep = 0;
  int64_t retain_interval = 0;
  // prune: also iterations another tool wrote (Megatron's own); never the tracker's.
  bool include_foreign = false;
};

int SaveCommand(const StepArgs& args);
// Runs fn on every rank of `backend`: "threads" (world ranks in this
// process) or "mpi" (this process's rank; mpirun must have started `world`).
// Throws kInvalidArgument for another backend or world, kUnsupported for mpi
// in a build without MPI.
void RunOnBackend(const std::string& backend, int world,
                  const std::function<void(Communicator&)>& fn);

// The simulated training loop over the checkpoint manager (harness/train.h).
int TrainCommand(const TrainArgs& args);
// A run's checkpoint root: list (exit 1 when the tracker names an
// incomplete checkpoint) or prune (retention applied offline).
int ManageCommand(const ManageArgs& args);
int LoadCommand(const StepArgs& args);
int RunCommand(const RunArgs& args);
// `check`: also every data file present with at least the bytes the
// metadata places in it; exit 2 naming the file otherwise.
int InspectCommand(const std::string& dir, bool json, bool check = false);
// Compares two checkpoints in global space (any layouts and formats), the
// keys `options` selects: exit 0 when identical, 1 when they differ. `json`
// prints the report (a verdict per key, with element counts and max errors)
// instead of lines.
int DiffCommand(const std::string& a, const std::string& b, const DiffOptions& options, bool json,
                const ReportPaths& reports = {});
// Metadata-only verdict per topology (harness/verify.h): 0 every topology
// loads, 1 some would not, 2 bad input or (--data) a damaged byte.
int VerifyCommand(const VerifyArgs& args);
// Loads the spec's request from the checkpoint under a topology and saves
// it there into --out (0 done, 2 failed).
int ReshardCommand(const ReshardArgs& args);
// Writes the full global tensor `key` (little-endian, stored dtype) to `out`.
int DumpCommand(const std::string& dir, const std::string& key, const std::string& out);
// verl per-rank FSDP files -> a checkpoint in `format` (engine/verl_convert.h).
// distckpt reshard DIR --world-size N [--fsdp 1|2] --out OUT: verl's per-rank
// files for N ranks (format/verl/verl_reshard.h).
int ReshardVerlCommand(const ReshardArgs& args);
int ImportVerlCommand(const std::string& src, const std::string& dst, const std::string& format);

// Loads a scenario file, or the embedded default for "".
Scenario LoadScenario(const std::string& path);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_COMMANDS_H_
