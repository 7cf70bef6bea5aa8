// The tracker file ROOT/latest_checkpointed_iteration.txt: the commit point
// of a training run's checkpoints. It holds a decimal iteration or
// "release" (Megatron), with any whitespace around it (Megatron strips it).
//
// WriteTracker writes it atomically (temp file, fsync, rename, directory
// fsync), so a reader sees the previous value or the new one, never a torn
// one. ReadTracker returns nullopt when there is no tracker and throws
// CheckpointError(kCorruption) naming the file for any other content.
//
// Thread-safety: concurrent readers are safe; one writer at a time (rank 0).
#ifndef DISTCKPT_MANAGER_TRACKER_H_
#define DISTCKPT_MANAGER_TRACKER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "io/env.h"

namespace distckpt {

struct Tracker {
  int64_t iteration = 0;  // 0 for release
  bool release = false;
  std::string ToString() const;  // "100" or "release"
  bool operator==(const Tracker&) const = default;
};

std::string TrackerPath(const std::string& root);
std::optional<Tracker> ReadTracker(Env* env, const std::string& root);
// Throws CheckpointError(kCorruption) naming `source` unless `text` is a tracker.
Tracker ParseTracker(const std::string& text, const std::string& source);
void WriteTracker(Env* env, const std::string& root, const Tracker& tracker);

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_TRACKER_H_
