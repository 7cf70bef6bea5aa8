// The distckpt commands. Each returns the process exit code:
// 0 = the verdict holds, 1 = the verdict fails (a value differs, a matrix
// cell fails), 2 = usage or input error (bad scenario, topology, checkpoint).
#ifndef DISTCKPT_CLI_COMMANDS_H_
#define DISTCKPT_CLI_COMMANDS_H_

#include <optional>
#include <string>

#include "scenario/runner.h"

namespace distckpt {

constexpr int kExitOk = 0;
constexpr int kExitVerdictFailed = 1;
constexpr int kExitInputError = 2;

struct StepArgs {
  std::string scenario;       // path, or "" for the embedded default
  std::string topology;
  std::string saved_topology;  // load: defaults to the checkpoint's recorded topology
  std::string dir;
  std::string backend = "threads";
  std::string strict;         // load: default = the scenario's
  std::string verify = "whole";  // load: whole | always | never
  std::string report_json;
  int pair = -1;              // scenario pair whose extras apply
};

struct RunArgs {
  std::string scenario;
  bool matrix = false;
  std::string backend = "threads";
  std::string format = "native";
  std::string report;
  std::string work_dir;
  bool keep = false;
};

int SaveCommand(const StepArgs& args);
int LoadCommand(const StepArgs& args);
int RunCommand(const RunArgs& args);
int InspectCommand(const std::string& dir, bool json);

// Loads a scenario file, or the embedded default for "".
Scenario LoadScenario(const std::string& path);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_COMMANDS_H_
