// save(): Megatron's dist_checkpointing.save for every rank of `comm`.
//
// Collective: every rank of `comm` calls Save with its own sharded state dict
// (empty shards included). Steps: apply factories and split off common state;
// check every shard's metadata; (validate_access_integrity) gather all ranks'
// metadata and check that main replicas tile every key exactly once; the
// coordinator (rank 0) prepares the directory; every rank writes its main
// replicas to its own data file(s) and fsyncs; rank 0 gathers the chunk
// metadata, adds rank 0's common state, and commits (metadata written last,
// atomically). Any failure on any rank makes Save throw on every rank, with
// the failing ranks named, and leaves no committed checkpoint.
//
// options.strategy (strategy/strategy.h): fully parallel, after validation,
// rewrites replica ids so that each shard is written by one rank of the
// parallelization group; the checkpoint is the same in global space. With a
// plan cache, a save of an unchanged structure reuses the last one's plan
// (strategy/plan_cache.h).
//
// A rank with a hardware thread to spare (ThreadsPerRank(comm) > 1: fewer
// ranks on the machine than hardware threads) lends its writer one thread of
// the helper pool (CheckpointWriter::SetHelpers): the native format hashes
// large chunks on it while writing them.
//
// Thread-safety: one call per rank; ranks run concurrently.
#ifndef DISTCKPT_ENGINE_SAVE_H_
#define DISTCKPT_ENGINE_SAVE_H_

#include <string>

#include "comm/communicator.h"
#include "engine/options.h"
#include "mapping/state_dict.h"

namespace distckpt {

SaveSummary Save(const Node& sharded_state_dict, const std::string& dir, Communicator& comm,
                 const SaveOptions& options = {});

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_SAVE_H_
