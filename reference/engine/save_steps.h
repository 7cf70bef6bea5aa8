// The steps Save and SaveAsync share (engine-internal): preparing a save
// (preprocess, shard checks, global validation, fully parallel
// distribution, the directory) and committing it (every rank's written
// metadata gathered, the coordinator commits last, atomically).
//
// Thread-safety: PrepareSave and CommitSave are collective (one call per
// rank); ForEachItemToWrite is a pure walk.
#ifndef DISTCKPT_ENGINE_SAVE_STEPS_H_
#define DISTCKPT_ENGINE_SAVE_STEPS_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "comm/communicator.h"
#include "engine/options.h"
#include "io/file_lock.h"
#include "mapping/state_dict.h"
#include "strategy/distribution.h"

namespace distckpt {

struct PreparedSave {
  const Format* format = nullptr;
  Env* env = nullptr;
  // The preprocessed shards, replica ids as written: the caller's state dict
  // itself when PrepareSave may borrow it and it is sharded only
  // (IsShardedOnly: no copy of every ShardedTensor per save), else a tree
  // of its own.
  const Node& sharded() const { return borrowed ? *borrowed : owned; }
  // The same, copied out of the caller's state dict first when borrowed.
  Node& mutable_sharded() {
    if (borrowed) {
      owned = *borrowed;
      borrowed = nullptr;
    }
    return owned;
  }
  Node owned;
  const Node* borrowed = nullptr;
  nlohmann::json common;  // rank 0's is committed
  std::string write_dir;  // where ranks write (a staging dir on overwrite)
  // Coordinator, POSIX Env: the save's exclusive lock on `<dir>.lock`
  // (io/file_lock.h), held from PrepareDirectory until the save ends.
  std::shared_ptr<FileLock> lock;
  // options.strategy.cache: this save's plan, stored in the cache on commit.
  bool reused_plan = false;
  uint64_t fingerprint = 0;
  std::optional<ShardDistribution> distribution;
};

// With `borrow`, the result may refer to `state_dict` (PreparedSave::sharded),
// which must then outlive it (Save; SaveAsync's outlives the call).
PreparedSave PrepareSave(const Node& state_dict, const std::string& dir, Communicator& comm,
                         const SaveOptions& options, SaveSummary& summary, bool borrow = false);

// Calls `tensor` for every non-empty main-replica ShardedTensor (with its
// data, on any device), and with an undefined Tensor for every shard, main replica or not, of a
// tensor of no elements (so the checkpoint records its key, dtype and global
// shape; the commit keeps one chunk per offset), and
// `object` for every main-replica ShardedObject (with its payload: the bytes
// of its unchanged record when `format` stores that encoding, else its data
// as JSON text) of a prepared tree: exactly what this rank writes, in tree
// order. Other empty shards are skipped.
void ForEachItemToWrite(
    const Node& sharded, const Format& format,
    const std::function<void(const ShardedTensor&, const Tensor&)>& tensor,
    const std::function<void(const ShardedObject&, const std::string&)>& object);

// Gathers `local` (what this rank wrote, fsync'd) from every rank; the
// coordinator merges and commits. Throws on every rank if it fails. With
// options.strategy.cache, ranks whose written layout is unchanged send only
// their checksums, and a successful commit refills the cache.
void CommitSave(CheckpointMetadata local, const PreparedSave& prepared, const std::string& dir,
                Communicator& comm, const SaveOptions& options);

// After a save failed on every rank (its writes are over): the coordinator
// removes the files it left (Format::RemoveUncommitted). Errors of the
// removal are dropped: the save's own error is the one reported.
void RemoveFailedSave(const PreparedSave& prepared, const std::string& dir, Communicator& comm);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_SAVE_STEPS_H_
