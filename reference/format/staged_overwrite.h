// Atomic overwrite of a committed checkpoint directory, shared by every
// format whose checkpoint is one self-contained directory with relative
// names inside (native, DCP). A format supplies what "committed" means (its
// metadata file exists) and which files an uncommitted save leaves behind.
//
//   PrepareStagedDirectory: `dir` holds a committed checkpoint (of this
//     format, or of any other: CommittedCheckpointIn) and no `overwrite` ->
//     refused, naming what it holds. Committed and `overwrite` -> ranks write
//     into `<dir>.staging`; the previous checkpoint is untouched. Otherwise
//     `dir` is created, stale files of an uncommitted save are removed and
//     ranks write into `dir`. A crash between the swap's two renames is
//     finished here first.
//   SwapInStaging: after the format committed `write_dir` (== staging),
//     rename dir -> dir.old, staging -> dir (the first rename undone if the
//     second fails), fsync the parent, remove dir.old.
//
// Crash windows (native/FORMAT.md, "Crash windows of an overwrite"): at no
// point is `dir` a half-committed checkpoint, and the previous checkpoint
// survives every failure before the second rename.
//
// Thread-safety: coordinator only; no state.
#ifndef DISTCKPT_FORMAT_STAGED_OVERWRITE_H_
#define DISTCKPT_FORMAT_STAGED_OVERWRITE_H_

#include <functional>
#include <string>

#include "io/env.h"

namespace distckpt {

struct StagedLayout {
  // True if the directory holds a committed checkpoint of the format.
  std::function<bool(Env*, const std::string& dir)> is_committed;
  // True for the names an uncommitted save of the format leaves behind.
  std::function<bool(const std::string& name)> is_stale;
};

// What committed checkpoint `dir` holds, of any format distckpt knows of
// ("a DCP checkpoint (.metadata)", "a native checkpoint (metadata.json)",
// "a zarr store (.zgroup)", "a verl FSDP checkpoint
// (model_world_size_2_rank_0.pt)"); empty when none. A save never writes
// over one unless told to replace it: the files of two checkpoints in one
// directory shadow each other.
std::string CommittedCheckpointIn(Env* env, const std::string& dir);

std::string PrepareStagedDirectory(Env* env, const std::string& dir, bool overwrite,
                                   const StagedLayout& layout);
// Format::RemoveUncommitted: nothing when `write_dir` is committed; else a
// staging `write_dir` removed whole, or the stale names removed from `dir`.
void RemoveUncommittedSave(Env* env, const std::string& dir, const std::string& write_dir,
                           const StagedLayout& layout);
// No-op when write_dir == dir (no overwrite).
void SwapInStaging(Env* env, const std::string& dir, const std::string& write_dir);
// Fails (kIncomplete) when `dir` is not a directory: "Checkpoint directory <dir>
// does not exist", plus " (an interrupted overwrite left the new checkpoint in
// <dir>.staging; ...)" when a committed staging directory waits.
void RequireCheckpointDirectory(Env* env, const std::string& dir, const StagedLayout& layout);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_STAGED_OVERWRITE_H_
