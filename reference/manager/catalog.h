// What a training run's root directory holds, rebuilt from disk (so
// checkpoints of earlier runs count too): every iteration directory of the
// layout, whether it is complete (the manager's manifest present and every
// component it lists a committed checkpoint) and, if not, why.
//
// Directories other tools wrote are adopted: a Megatron iteration directory
// without distckpt's manifest is complete when it is itself a committed
// checkpoint of a format distckpt reads (torch_dist: metadata.json naming the
// backend and DCP's .metadata, common.pt or the common_state object; native;
// zarr) — a manifest is synthesized (CatalogEntry::foreign).
//
// Thread-safety: pure functions of the directory (rank-local, no collectives).
#ifndef DISTCKPT_MANAGER_CATALOG_H_
#define DISTCKPT_MANAGER_CATALOG_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/env.h"
#include "manager/layout.h"
#include "manager/tracker.h"

namespace distckpt {

// The manifest of a complete iteration directory (kManifestFile).
struct IterationManifest {
  int64_t iteration = 0;
  CheckpointLayout layout = CheckpointLayout::kMegatron;
  std::vector<std::string> components;  // Megatron: {""} (the directory itself)
  std::vector<std::string> contents;    // "model", "optimizer", "extra", ...
  std::string topology;
  nlohmann::json ToJson() const;
  // Throws CheckpointError(kCorruption) naming `source`.
  static IterationManifest FromJson(const nlohmann::json& j, const std::string& source);
};

struct CatalogEntry {
  int64_t iteration = 0;
  std::string path;
  bool complete = false;
  std::string why_incomplete;  // when !complete
  std::optional<IterationManifest> manifest;
  // Not started by distckpt (no kManifestFile, no kStartedFile): written by
  // another tool; never cleared or pruned unless asked by name.
  bool foreign = false;
  std::string format;  // complete: the format detected ("dcp", "native", ...)
};

struct Catalog {
  std::vector<CatalogEntry> entries;  // by iteration, ascending
  std::optional<Tracker> tracker;
  std::string tracker_error;  // a tracker that could not be read (corrupt)

  const CatalogEntry* Find(int64_t iteration) const;
  std::vector<int64_t> CompleteIterations() const;
};

// The directory of a component of an iteration directory ("" = itself).
std::string ComponentDir(const std::string& iteration_dir, const std::string& component);
// Reads and checks one iteration directory (CatalogEntry.complete / why).
// Under the Megatron layout a directory without a manifest that is a
// committed checkpoint is complete and foreign.
CatalogEntry InspectIterationDir(Env* env, const std::string& path, int64_t iteration,
                                 CheckpointLayout layout = CheckpointLayout::kMegatron);
// The format name of the committed checkpoint in `dir`, or "" if none.
std::string DetectCommitted(Env* env, const std::string& dir);
// A run root given where a checkpoint is expected (`verify ROOT`, `inspect
// ROOT`): the directory its tracker names (ROOT/iter_N, ROOT/release) when
// `path` holds a tracker and is not itself a committed checkpoint; nullopt
// otherwise. An unreadable tracker throws CheckpointError(kCorruption) naming
// it. Megatron's layout, or verl's (ROOT/global_step_N, when there is no
// ROOT/iter_N): a verl step directory holds one checkpoint per component
// (name the component's directory, or see VerlMegatronDistCkpt).
std::optional<std::string> TrackedIterationDir(Env* env, const std::string& path);
// Every iteration directory under `root` (missing root: empty catalog).
Catalog ScanRoot(Env* env, const std::string& root, CheckpointLayout layout);

// The layout of a run root when none is given: verl when `root` holds
// global_step_N directories and no iter_N ones (verl's trainer), else
// Megatron. `why` (optional) says what decided it.
CheckpointLayout DetectCheckpointLayout(Env* env, const std::string& root,
                                        std::string* why = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_CATALOG_H_
