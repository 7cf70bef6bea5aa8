// Directory layouts of a training run's checkpoints (megatron-semantics:
// the training loop's side). Megatron: ROOT/iter_0000100/ holding the
// checkpoint; verl: ROOT/global_step_100/ holding one checkpoint per
// component (actor/, critic/...). Both keep ROOT/latest_checkpointed_iteration.txt
// (the tracker: an iteration or, Megatron only, "release" for ROOT/release/).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MANAGER_LAYOUT_H_
#define DISTCKPT_MANAGER_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distckpt {

enum class CheckpointLayout { kMegatron, kVerl };

// "megatron" / "verl"; ParseCheckpointLayout throws CheckpointError(kInvalidArgument).
std::string_view CheckpointLayoutName(CheckpointLayout layout);
CheckpointLayout ParseCheckpointLayout(std::string_view name);

inline constexpr char kTrackerFile[] = "latest_checkpointed_iteration.txt";
inline constexpr char kReleaseDir[] = "release";
// Written by the manager into an iteration directory once every component of
// it committed, before the tracker: iteration, layout, components, contents.
inline constexpr char kManifestFile[] = "distckpt_iteration.json";
// Written by the manager into an iteration directory it creates, before any
// data: the directory is distckpt's to clear if its save never finished.
// A directory with neither file was written by someone else (Megatron's own
// training loop, verl): distckpt never deletes or replaces it unless told to.
inline constexpr char kStartedFile[] = "distckpt_started";
// ROOT/distckpt_writer.lock: the writer lock of a root (manager.h), held by
// the run writing it; it records the holder ("pid P on host H").
inline constexpr char kWriterLockFile[] = "distckpt_writer.lock";
// ROOT/non_persistent/: Megatron's non-persistent global checkpoints, a root
// of their own (iteration directories and tracker) where only the newest is kept.
inline constexpr char kNonPersistentDir[] = "non_persistent";

// "iter_0000100" (Megatron: 7 digits, more when needed) or "global_step_100".
std::string IterationDirName(CheckpointLayout layout, int64_t iteration);
// The iteration of a directory name of this layout, or nullopt.
std::optional<int64_t> ParseIterationDirName(CheckpointLayout layout, std::string_view name);

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_LAYOUT_H_
