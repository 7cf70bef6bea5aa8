#include "manager/catalog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/json_integer.h"
#include "core/json_parse.h"
#include "format/dcp/megatron_files.h"
#include "format/format.h"
#include "format/verl/verl_files.h"
#include "format/verl/verl_megatron.h"

namespace distckpt {
namespace {

bool IsCommitted(Env* env, const std::string& dir) { return !DetectCommitted(env, dir).empty(); }

// A global_step_N directory verl's trainer wrote: its components are the
// subfolders holding verl FSDP checkpoints (actor, critic, ...), complete
// when every one is whole (VerlCheckpointGap), or verl Megatron checkpoints
// (dist_ckpt/ whose metadata.json, Megatron's last file, names a backend).
// data.pt (the dataloader) is optional, as verl's resume treats it.
CatalogEntry InspectVerlStep(Env* env, CatalogEntry entry) {
  IterationManifest m;
  m.iteration = entry.iteration;
  m.layout = CheckpointLayout::kVerl;
  std::vector<std::string> names = env->ListDir(entry.path);
  std::sort(names.begin(), names.end());
  std::string topology;
  for (const std::string& name : names) {
    const std::string dir = JoinPath(entry.path, name);
    if (!env->IsDirectory(dir)) continue;
    if (IsVerlMegatronComponent(env, dir)) {
      if (entry.format.empty()) entry.format = "verl-megatron";
      if (entry.format != "verl-megatron") {
        entry.why_incomplete =
            fmt::format("verl component '{}' is Megatron, another one FSDP", name);
        return entry;
      }
      m.components.push_back(name);
      continue;
    }
    if (env->IsDirectory(JoinPath(dir, kVerlDistCkptDir))) {
      entry.why_incomplete = fmt::format(
          "verl component '{}': {}/{} has no {} naming a sharded backend (the save never "
          "finished)",
          name, kVerlDistCkptDir, kMegatronConfigFileName, kMegatronConfigFileName);
      return entry;
    }
    bool verl = false;
    for (const std::string& f : env->ListDir(dir)) {
      verl = verl || f.starts_with("model_world_size_") || f.starts_with("optim_world_size_");
    }
    if (!verl) continue;
    std::vector<std::string> contents;
    int world = 0;
    if (std::string why = VerlCheckpointGap(dir, &contents, &world); !why.empty()) {
      entry.why_incomplete = fmt::format("verl component '{}': {}", name, why);
      return entry;
    }
    if (entry.format.empty()) entry.format = "verl-fsdp";
    if (entry.format != "verl-fsdp") {
      entry.why_incomplete = fmt::format("verl component '{}' is FSDP, another one Megatron", name);
      return entry;
    }
    m.components.push_back(name);
    if (m.contents.empty()) m.contents = contents;
    if (topology.empty()) topology = fmt::format("dp={}", world);
  }
  if (m.components.empty()) {
    entry.why_incomplete = fmt::format(
        "not written by distckpt (no {}) and no verl component (a folder with "
        "model_world_size_W_rank_r.pt, or with Megatron's dist_ckpt/)",
        kManifestFile);
    return entry;
  }
  m.topology = topology;
  entry.manifest = std::move(m);
  entry.complete = true;
  return entry;
}

}  // namespace

std::string DetectCommitted(Env* env, const std::string& dir) {
  if (!env->IsDirectory(dir)) return "";
  for (const Format* format : AllFormats()) {
    if (format->Detect(env, dir)) return std::string(format->name());
  }
  return "";
}

std::optional<std::string> TrackedIterationDir(Env* env, const std::string& path) {
  if (!env->IsDirectory(path) || !env->FileExists(TrackerPath(path))) return std::nullopt;
  if (!DetectCommitted(env, path).empty()) return std::nullopt;  // a checkpoint, not a root
  const std::optional<Tracker> tracker = ReadTracker(env, path);
  if (!tracker) return std::nullopt;
  if (tracker->release) return JoinPath(path, kReleaseDir);
  const std::string megatron =
      JoinPath(path, IterationDirName(CheckpointLayout::kMegatron, tracker->iteration));
  const std::string verl =
      JoinPath(path, IterationDirName(CheckpointLayout::kVerl, tracker->iteration));
  return !env->IsDirectory(megatron) && env->IsDirectory(verl) ? verl : megatron;
}

nlohmann::json IterationManifest::ToJson() const {
  return {{"version", 1},
          {"iteration", iteration},
          {"layout", std::string(CheckpointLayoutName(layout))},
          {"components", components},
          {"contents", contents},
          {"topology", topology}};
}

IterationManifest IterationManifest::FromJson(const nlohmann::json& j, const std::string& source) {
  try {
    IterationManifest m;
    if (JsonInteger<int64_t>(j.at("version"), "version") != 1) {
      Fail(ErrorKind::kCorruption, "manifest {}: unknown version {}", source,
           j.at("version").dump());
    }
    m.iteration = JsonInteger<int64_t>(j.at("iteration"), "iteration");
    m.layout = ParseCheckpointLayout(j.at("layout").get<std::string>());
    m.components = j.at("components").get<std::vector<std::string>>();
    m.contents = j.at("contents").get<std::vector<std::string>>();
    m.topology = j.at("topology").get<std::string>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kCorruption, "manifest {}: {}", source, e.what());
  } catch (const CheckpointError& e) {
    if (e.kind() == ErrorKind::kCorruption) throw;
    Fail(ErrorKind::kCorruption, "manifest {}: {}", source, e.what());
  }
}

const CatalogEntry* Catalog::Find(int64_t iteration) const {
  for (const CatalogEntry& e : entries) {
    if (e.iteration == iteration) return &e;
  }
  return nullptr;
}

std::vector<int64_t> Catalog::CompleteIterations() const {
  std::vector<int64_t> out;
  for (const CatalogEntry& e : entries) {
    if (e.complete) out.push_back(e.iteration);
  }
  return out;
}

std::string ComponentDir(const std::string& iteration_dir, const std::string& component) {
  return component.empty() ? iteration_dir : JoinPath(iteration_dir, component);
}

CatalogEntry InspectIterationDir(Env* env, const std::string& path, int64_t iteration,
                                 CheckpointLayout layout) {
  CatalogEntry entry;
  entry.iteration = iteration;
  entry.path = path;
  std::string manifest_path = JoinPath(path, kManifestFile);
  if (!env->FileExists(manifest_path)) {
    if (env->FileExists(JoinPath(path, kStartedFile))) {
      entry.why_incomplete = fmt::format("no {} (the save never finished)", kManifestFile);
      return entry;
    }
    entry.foreign = true;
    if (layout == CheckpointLayout::kVerl) return InspectVerlStep(env, std::move(entry));
    if (layout == CheckpointLayout::kMegatron) entry.format = DetectCommitted(env, path);
    if (entry.format.empty()) {
      entry.why_incomplete = fmt::format(
          "not written by distckpt (no {}) and not a committed checkpoint of a format distckpt "
          "reads (metadata.json with .metadata, common.pt or native metadata)",
          kManifestFile);
      return entry;
    }
    // Megatron's dist_checkpointing.save writes metadata.json (its
    // CheckpointingConfig) last, after every rank's data and DCP's .metadata.
    const std::string config = JoinPath(path, kMegatronConfigFileName);
    if (entry.format != "native" &&
        (!env->FileExists(config) ||
         !MegatronShardedBackend(ReadFileToString(env, config)).has_value())) {
      entry.why_incomplete = fmt::format(
          "not written by distckpt (no {}), and {} (Megatron's last file of a save) is missing or "
          "names no sharded_backend",
          kManifestFile, config);
      return entry;
    }
    // Megatron's own save: the directory is the checkpoint (one component),
    // holding whatever its state dict held.
    IterationManifest m;
    m.iteration = iteration;
    m.layout = layout;
    m.components = {""};
    entry.manifest = std::move(m);
    entry.complete = true;
    return entry;
  }
  try {
    nlohmann::json j = ParseJson(ReadFileToString(env, manifest_path), manifest_path);
    entry.manifest = IterationManifest::FromJson(j, manifest_path);
  } catch (const std::exception& e) {
    entry.why_incomplete = fmt::format("unreadable manifest: {}", e.what());
    return entry;
  }
  if (entry.manifest->iteration != iteration) {
    entry.why_incomplete =
        fmt::format("manifest {} names iteration {}", manifest_path, entry.manifest->iteration);
    return entry;
  }
  for (const std::string& c : entry.manifest->components) {
    if (entry.format.empty()) entry.format = DetectCommitted(env, ComponentDir(path, c));
    if (!IsCommitted(env, ComponentDir(path, c))) {
      entry.why_incomplete =
          fmt::format("component '{}' is not a committed checkpoint", c.empty() ? "." : c);
      return entry;
    }
  }
  entry.complete = true;
  return entry;
}

CheckpointLayout DetectCheckpointLayout(Env* env, const std::string& root, std::string* why) {
  int steps = 0, iters = 0;
  std::vector<std::string> names;
  if (env->IsDirectory(root)) names = env->ListDir(root);
  for (const std::string& n : names) {
    steps += ParseIterationDirName(CheckpointLayout::kVerl, n).has_value();
    iters += ParseIterationDirName(CheckpointLayout::kMegatron, n).has_value() || n == kReleaseDir;
  }
  const bool verl = steps > 0 && iters == 0;
  if (why) {
    *why = verl ? fmt::format("{} global_step_N folders, no iter_N", steps)
                : fmt::format("{} iter_N folders{}", iters,
                              steps ? fmt::format(" beside {} global_step_N", steps) : "");
  }
  return verl ? CheckpointLayout::kVerl : CheckpointLayout::kMegatron;
}

Catalog ScanRoot(Env* env, const std::string& root, CheckpointLayout layout) {
  Catalog catalog;
  if (!env->IsDirectory(root)) return catalog;
  try {
    catalog.tracker = ReadTracker(env, root);
  } catch (const CheckpointError& e) {
    catalog.tracker_error = e.what();
  }
  for (const std::string& name : env->ListDir(root)) {
    std::optional<int64_t> it = ParseIterationDirName(layout, name);
    std::string path = JoinPath(root, name);
    if (!it || !env->IsDirectory(path)) continue;
    catalog.entries.push_back(InspectIterationDir(env, path, *it, layout));
  }
  std::sort(catalog.entries.begin(), catalog.entries.end(),
            [](const CatalogEntry& a, const CatalogEntry& b) { return a.iteration < b.iteration; });
  return catalog;
}

}  // namespace distckpt
