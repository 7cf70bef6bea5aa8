// What the distckpt commands share: option helpers (flags added the same way
// by several commands, checks applied to every command's options), and the
// few steps several handlers take (the backend, the scenario, the spec).
//
// Thread-safety: for main's thread, before and while a command runs.
#ifndef DISTCKPT_CLI_OPTIONS_H_
#define DISTCKPT_CLI_OPTIONS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/report.h"
#include "comm/communicator.h"
#include "harness/run/runner.h"
#include "harness/tools/verify.h"

namespace distckpt {

// --comm: which communicator carries a load's exchange.
void AddCommOption(CLI::App* cmd, StepOptions& step, const char* help);
// --report, --junit, --markdown (cli/report.h); `per`: what a testcase is.
void AddReportOptions(CLI::App* cmd, ReportPaths& paths, const char* per);
// --spec (required) and --set.
void AddSpecOptions(CLI::App* cmd, std::string& spec, std::vector<std::string>& sets);

// Every integer option of every command (app and its subcommands) takes
// plain decimal digits whose value fits its type.
void StrictIntegers(CLI::App& app);
// Every checkpoint path option of every command takes a URI too
// (io/storage_path.h); an unreachable storage or unknown scheme is refused.
void StoragePaths(CLI::App& app);

// A training run's root given where a checkpoint is expected (`verify ROOT`):
// the checkpoint its tracker names, said on stderr.
void ResolveRunRoot(std::string& path);

// Runs `command` under `backend`. For "mpi" it runs in an MPI session; when
// `topology` is given and this process is not in an MPI job, the command
// instead runs itself again as `mpirun -np <world of topology>` with the same
// arguments and returns that exit code (as `run --backend mpi` launches its
// jobs).
int OnBackend(CommandLine& line, const std::string& backend, const std::string* topology,
              const std::function<int()>& command);
// Runs fn on every rank of `backend`: "threads" (world ranks in this
// process) or "mpi" (this process's rank; mpirun must have started `world`).
// Throws kInvalidArgument for another backend or world, kUnsupported for mpi
// in a build without MPI.
void RunOnBackend(const std::string& backend, int world,
                  const std::function<void(Communicator&)>& fn);

// Loads a scenario file, or the embedded default for "".
Scenario LoadScenario(const std::string& path);
// --device and --comm: a device this machine has, and NCCL only where it
// has work (a fully parallel or two-stage load on CUDA tensors).
void CheckStepDevice(const StepOptions& step);
// a / b with three decimals, "-" for b = 0.
std::string Ratio(uint64_t a, uint64_t b);

// verify / reshard: the request spec (a file, or "gpt" inferred) for the
// checkpoint in `dir`; the strict mode of --strict, else the spec's.
Scenario SpecOf(const std::string& dir, const std::string& spec,
                const std::vector<std::string>& sets);
StrictHandling StrictOf(const std::string& flag, const Scenario& spec);
// "  object rng_state: regridded: ..." for each stored object a topology does
// not keep; the number of them.
int PrintObjectFates(const std::vector<ObjectFate>& fates);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_OPTIONS_H_
