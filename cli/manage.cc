// distckpt manage: offline views of a training run's checkpoint root: list
// (exit 1 when the tracker names an incomplete checkpoint) or prune
// (retention applied offline).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/manager.h"
#include "manager/retention.h"

namespace distckpt {
namespace {

struct ManageArgs {
  std::string action;  // list | prune
  std::string dir;
  std::string layout;  // "": detected (DetectCheckpointLayout)
  bool json = false;
  int keep = 0;
  int64_t retain_interval = 0;
  // prune: also iterations another tool wrote (Megatron's own); never the tracker's.
  bool include_foreign = false;
};

int ManageCommand(const ManageArgs& args) {
  Env* env = Env::Default();
  std::string detected;
  const CheckpointLayout layout = args.layout.empty()
                                      ? DetectCheckpointLayout(env, args.dir, &detected)
                                      : ParseCheckpointLayout(args.layout);
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
    j["layout"] = CheckpointLayoutName(layout);
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
    std::cout << fmt::format(
        "layout: {} ({})\n", CheckpointLayoutName(layout),
        detected.empty() ? "--layout" : "detected: " + detected + "; --layout forces one");
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

}  // namespace

Command AddManageCommand(CLI::App& app) {
  auto args = std::make_shared<ManageArgs>();
  CLI::App* manage = app.add_subcommand("manage", "a training run's checkpoint root");
  manage->add_option("action", args->action, "list or prune")
      ->required()
      ->check(CLI::IsMember({"list", "prune"}));
  manage->add_option("dir", args->dir, "checkpoint root")->required();
  manage
      ->add_option("--layout", args->layout,
                   "megatron or verl (default: detected, verl when the root holds "
                   "global_step_N folders and no iter_N)")
      ->check(CLI::IsMember({"megatron", "verl"}));
  manage->add_flag("--json", args->json, "list as JSON");
  manage->add_option("--keep", args->keep, "prune: keep the last K");
  manage->add_flag("--include-foreign", args->include_foreign,
                   "prune: also delete superseded iterations distckpt did not write (Megatron's "
                   "own); the tracker's is never deleted");
  manage->add_option("--retain-interval", args->retain_interval, "prune: keep multiples of R");
  return {manage, [args](CommandLine&) { return ManageCommand(*args); }};
}

}  // namespace distckpt
