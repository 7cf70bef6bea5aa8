// What `distckpt save` and `distckpt load` share (cli/save.cc, cli/load.cc):
// the step's flags, parsed straight into its StepOptions (harness/run/runner.h),
// and a step run on every rank of the chosen backend.
//
// Thread-safety: OnRanks runs the step on the ranks' threads; the rest is
// for main's thread.
#ifndef DISTCKPT_CLI_STEP_H_
#define DISTCKPT_CLI_STEP_H_

#include <CLI/CLI.hpp>
#include <string>
#include <utility>

#include "cli/options.h"
#include "harness/run/runner.h"

namespace distckpt {

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
  std::string index_dir;  // load: --index-dir (cli/index_hint.h)
  int pair = -1;          // scenario pair whose extras apply
  // The step's options: strategies and what the harness does around them
  // (harness/run/runner.h: --fully-parallel, --async, --local, --device, ...).
  StepOptions step;
};

// The flags of save (load = false) or load (load = true) into `a`.
void AddStepOptions(CLI::App* cmd, StepArgs& a, bool load);
// What the flags alone cannot check: the device, and a directory to use.
void CheckStepArgs(const StepArgs& args);
// The scenario's pair --pair names; nullptr for none (-1).
const PairSpec* PairAt(const Scenario& s, int index);
// --report-json: the step report as JSON ("" = none).
void WriteReport(const std::string& path, const StepReport& report);

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

}  // namespace distckpt

#endif  // DISTCKPT_CLI_STEP_H_
