// The node-local files of local (non-persistent) checkpoints
// (docs/megatron-semantics.md §4.8, NVRx LocalCheckpointManager): rank H keeps, in
// <root>/<H>/, one file per (iteration, owner rank) it holds — its own and,
// with replication, its clique peers' — named
// "iter_<iteration, 7 digits>_<owner>_local.bin". A file is written as
// "<name>.dirty", fsync'd, and renamed over "<name>", so a
// name without ".dirty" is always complete (a crashed save's dirty file is
// overwritten by the next save of that iteration).
//
// Thread-safety: a LocalStore belongs to one rank; distinct ranks' stores
// touch distinct directories.
#ifndef DISTCKPT_STRATEGY_LOCAL_STORE_H_
#define DISTCKPT_STRATEGY_LOCAL_STORE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/env.h"

namespace distckpt {

struct LocalFileId {
  int64_t iteration = 0;
  int owner = 0;
  friend auto operator<=>(const LocalFileId&, const LocalFileId&) = default;
};

std::string LocalFileName(LocalFileId id);  // "iter_0000123_4_local.bin"
// The id of a committed file name; nullopt for anything else (".dirty" included).
std::optional<LocalFileId> ParseLocalFileName(std::string_view name);

class LocalStore {
 public:
  LocalStore(Env* env, std::string root, int holder);

  const std::string& dir() const { return dir_; }
  // Writes `blob` as `id` (dirty file, fsync, rename, directory fsync).
  void Write(LocalFileId id, std::span<const std::byte> blob);
  std::string Read(LocalFileId id) const;
  // Committed files, sorted.
  std::vector<LocalFileId> List() const;
  // Removes every file (dirty ones too) of `iteration`, or of every
  // iteration before `iteration`.
  void RemoveIteration(int64_t iteration);
  void RemoveOlderThan(int64_t iteration);

 private:
  void RemoveIf(const std::function<bool(int64_t iteration)>& pred);

  Env* env_;
  std::string dir_;
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_LOCAL_STORE_H_
