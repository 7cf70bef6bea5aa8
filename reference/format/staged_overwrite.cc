#include "format/staged_overwrite.h"

#include "core/error.h"
#include "format/dcp/megatron_files.h"

namespace distckpt {
namespace {

// `dir` + suffix, naming a sibling of `dir` even when it ends in '/'.
std::string Sibling(const std::string& dir, std::string_view suffix) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + std::string(suffix);
}

std::string StagingDir(const std::string& dir) { return Sibling(dir, ".staging"); }
std::string OldDir(const std::string& dir) { return Sibling(dir, ".old"); }
std::string ParentDir(const std::string& dir) { return DirName(Sibling(dir, "")); }

// Megatron's CheckpointingConfig (a handful of fields), not a native metadata.json.
bool IsMegatronConfigFile(Env* env, const std::string& path) {
  return env->FileSize(path) <= 4096 &&
         MegatronShardedBackend(ReadFileToString(env, path)).has_value();
}

}  // namespace

std::string CommittedCheckpointIn(Env* env, const std::string& dir) {
  if (!env->IsDirectory(dir)) return "";
  for (const std::string& name : env->ListDir(dir)) {
    if (name == ".metadata") return "a DCP checkpoint (.metadata)";
    // Megatron's own metadata.json (its config beside torch_dist data) is
    // not a checkpoint by itself: its .metadata is.
    if (name == "metadata.json" && !IsMegatronConfigFile(env, JoinPath(dir, name))) {
      return "a native checkpoint (metadata.json)";
    }
    if (name == ".zgroup" || name == ".zarray" || name == "zarr.json") {
      return fmt::format("a zarr store ({})", name);
    }
    if (name.starts_with("model_world_size_") && name.ends_with(".pt")) {
      return fmt::format("a verl FSDP checkpoint ({})", name);
    }
  }
  return "";
}

std::string PrepareStagedDirectory(Env* env, const std::string& dir, bool overwrite,
                                   const StagedLayout& layout) {
  const std::string staging = StagingDir(dir);
  const std::string old = OldDir(dir);
  if (!env->IsDirectory(dir) && layout.is_committed(env, staging)) {
    // A crash between the two renames of an overwrite: finish the swap.
    env->RenameFile(staging, dir);
    env->SyncDir(ParentDir(dir));
    env->RemoveAll(old);
  }
  std::string committed = CommittedCheckpointIn(env, dir);
  if (committed.empty() && layout.is_committed(env, dir)) committed = "a committed checkpoint";
  if (!committed.empty()) {
    if (!overwrite) {
      Fail(ErrorKind::kInvalidArgument,
           "refusing to save into {}: it holds {}; a save replaces a committed checkpoint only "
           "when told to (distckpt save --overwrite, SaveOptions::overwrite)",
           dir, committed);
    }
    // The swap is two renames: a store without atomic rename (an object
    // store) would copy, and a reader could see the mix.
    RequireCapability(env, EnvCapability::kAtomicRename,
                      fmt::format("overwrite the committed checkpoint in {}", dir));
    if (env->FileExists(old)) {
      Fail(ErrorKind::kInvalidArgument,
           "cannot overwrite {}: {} exists (an interrupted overwrite leaves the previous "
           "checkpoint there); remove or rename it first",
           dir, old);
    }
    env->RemoveAll(staging);
    env->CreateDirs(staging);
    return staging;
  }
  // Debris of an overwrite that failed before its commit (never a committed
  // checkpoint: that one was swapped in above).
  if (env->IsDirectory(staging) && !layout.is_committed(env, staging)) env->RemoveAll(staging);
  env->CreateDirs(dir);
  for (const std::string& name : env->ListDir(dir)) {
    if (layout.is_stale(name)) env->RemoveFile(JoinPath(dir, name));
  }
  return dir;
}

void RemoveUncommittedSave(Env* env, const std::string& dir, const std::string& write_dir,
                           const StagedLayout& layout) {
  if (layout.is_committed(env, write_dir)) return;  // the commit ran: keep it
  if (write_dir != dir) {
    env->RemoveAll(write_dir);  // a staging directory holds this save's files only
    return;
  }
  if (!env->IsDirectory(dir)) return;
  for (const std::string& name : env->ListDir(dir)) {
    if (layout.is_stale(name)) env->RemoveFile(JoinPath(dir, name));
  }
}

void SwapInStaging(Env* env, const std::string& dir, const std::string& write_dir) {
  if (write_dir == dir) return;
  const std::string old = OldDir(dir);
  env->RenameFile(dir, old);
  try {
    env->RenameFile(write_dir, dir);
  } catch (const CheckpointError&) {
    try {
      env->RenameFile(old, dir);  // put the previous checkpoint back
    } catch (const CheckpointError&) {
      // Both checkpoints survive (dir.old, staging); PrepareStagedDirectory finishes the swap.
    }
    throw;
  }
  env->SyncDir(ParentDir(dir));
  env->RemoveAll(old);
}

void RequireCheckpointDirectory(Env* env, const std::string& dir, const StagedLayout& layout) {
  if (env->IsDirectory(dir)) return;
  const std::string staging = StagingDir(dir);
  Fail(ErrorKind::kIncomplete, "Checkpoint directory {} does not exist{}", dir,
       layout.is_committed(env, staging)
           ? fmt::format(" (an interrupted overwrite left the new checkpoint in {}; the next save "
                         "to {} finishes the swap)",
                         staging, dir)
           : "");
}

}  // namespace distckpt
