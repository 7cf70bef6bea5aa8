// distckpt: the command-line front end (see README.md and docs/cli.md for the
// contract). Each command is in its own file (cli/commands.h); this is the
// table, the flags every command has, and the exit code of an error.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "format/dcp/unknown_globals.h"  // internal: --strict-globals sets the unpickler policy
#include "io/storage_path.h"

int main(int argc, char** argv) {
  using namespace distckpt;
  CLI::App app{"distckpt: distributed checkpoint save/load under any parallel layout"};
  app.require_subcommand(1);
  std::vector<Command> commands = {
      AddRunCommand(app),        AddSaveCommand(app),  AddLoadCommand(app),
      AddInspectCommand(app),    AddDiffCommand(app),  AddVerifyCommand(app),
      AddReshardCommand(app),    AddIndexCommand(app), AddDumpCommand(app),
      AddImportVerlCommand(app), AddTrainCommand(app), AddManageCommand(app),
      AddExportCommand(app),     AddImportCommand(app)};
  bool strict_globals = false;
  app.add_flag("--strict-globals", strict_globals,
               "refuse a pickled class off distckpt's allow-list (Megatron's weights_only load) "
               "instead of carrying it as opaque data with a warning; any command");
  app.fallthrough();
  commands.push_back(AddDevicesCommand(app));  // added after fallthrough(): it inherits it

  StrictIntegers(app);
  StoragePaths(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitInputError;
  }

  if (strict_globals) SetUnknownGlobalPolicy(UnknownGlobalPolicy::kRefuse);
  // Every unknown class a command carried, named once it has run (also when it failed).
  struct WarnUnknownGlobals {
    ~WarnUnknownGlobals() {
      for (const UnknownGlobalNote& note : TakeUnknownGlobalNotes())
        std::cerr << DescribeUnknownGlobal(note) << "\n";
    }
  } warn_unknown_globals;
  // What reached object storage (requests, bytes), on stderr, once the command ran.
  struct StorageTraffic {
    ~StorageTraffic() {
      if (std::string s = StorageTrafficSummary(); !s.empty()) std::cerr << s << "\n";
    }
  } storage_traffic;

  CommandLine line{argc, argv};
  try {
    for (Command& command : commands) {
      if (command.app->parsed()) return command.run(line);
    }
  } catch (const CheckpointError& e) {
    std::cerr << "distckpt: error (" << ErrorKindName(e.kind()) << "): " << e.what() << "\n";
    return kExitInputError;
  } catch (const std::exception& e) {
    // Not a CheckpointError, so its message need not name a file: name the
    // command's inputs (its arguments that are paths).
    std::string inputs;
    for (int i = 1; i < argc; ++i) {
      std::error_code ec;
      if (argv[i][0] != '-' && std::filesystem::exists(argv[i], ec))
        inputs += (inputs.empty() ? " (reading " : ", ") + std::string(argv[i]);
    }
    std::cerr << "distckpt: error: " << e.what() << (inputs.empty() ? "" : inputs + ")") << "\n";
    return kExitInputError;
  }
  return kExitInputError;
}
