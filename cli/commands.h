// The distckpt commands, one file each (cli/<command>.cc): Add<Command>Command
// adds the subcommand with its flags and help to the app and returns its
// handler. Each handler returns the process exit code: 0 = the verdict holds,
// 1 = the verdict fails (a value differs, a matrix cell fails), 2 = usage or
// input error (bad scenario, topology, checkpoint); a CheckpointError it
// throws is reported by main as exit 2.
#ifndef DISTCKPT_CLI_COMMANDS_H_
#define DISTCKPT_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>

namespace distckpt {

constexpr int kExitOk = 0;
constexpr int kExitVerdictFailed = 1;
constexpr int kExitInputError = 2;

// The process's arguments, for a command that starts MPI or relaunches
// itself under mpirun (cli/options.h: OnBackend).
struct CommandLine {
  int argc = 0;
  char** argv = nullptr;
};

struct Command {
  CLI::App* app = nullptr;               // the subcommand, its flags added
  std::function<int(CommandLine&)> run;  // runs it once app->parsed()
};

// In `distckpt --help`'s order.
Command AddRunCommand(CLI::App& app);         // cli/run.cc
Command AddSaveCommand(CLI::App& app);        // cli/save.cc
Command AddLoadCommand(CLI::App& app);        // cli/load.cc
Command AddInspectCommand(CLI::App& app);     // cli/inspect.cc
Command AddDiffCommand(CLI::App& app);        // cli/diff.cc
Command AddVerifyCommand(CLI::App& app);      // cli/verify.cc
Command AddReshardCommand(CLI::App& app);     // cli/reshard.cc
Command AddIndexCommand(CLI::App& app);       // cli/index.cc
Command AddDumpCommand(CLI::App& app);        // cli/dump.cc
Command AddImportVerlCommand(CLI::App& app);  // cli/import_verl.cc
Command AddTrainCommand(CLI::App& app);       // cli/train.cc
Command AddManageCommand(CLI::App& app);      // cli/manage.cc
Command AddExportCommand(CLI::App& app);      // cli/export.cc
Command AddImportCommand(CLI::App& app);      // cli/import.cc
Command AddDevicesCommand(CLI::App& app);     // cli/devices.cc

}  // namespace distckpt

#endif  // DISTCKPT_CLI_COMMANDS_H_
