// load(): Megatron's dist_checkpointing.load for every rank of `comm`.
//
// Collective: every rank calls Load with its request (ShardedTensors whose
// `data` is a preallocated destination or undefined, ShardedObjects,
// factories, nonpersistent objects, common values). Steps: open the
// checkpoint (a directory without committed metadata is refused); apply
// strict handling (the checkpoint's keys vs this rank's and all ranks'
// requested keys); (validate_access_integrity) check the request's main
// replicas tile every key; plan, for every requested shard, the overlapping
// stored chunks and read exactly those bytes into the destination,
// converting dtype if the request's differs; zero-fill outside the stored
// shape for allow_shape_mismatch; read objects; merge with the checkpoint's
// common state and the request's nonpersistent values; apply factory merges.
// Any failure on any rank makes Load throw on every rank.
//
// options.strategy (strategy/strategy.h) changes who reads which shard from
// storage: fully parallel and two-stage loads read each shard once per
// parallelization group and exchange the rest between ranks; the result is
// the same.
//
// Each rank reads with its share of this machine's hardware threads
// (hardware threads / comm.ranks_on_node(), at least one reader).
//
// Thread-safety: one call per rank; ranks run concurrently.
#ifndef DISTCKPT_ENGINE_LOAD_H_
#define DISTCKPT_ENGINE_LOAD_H_

#include <string>

#include "comm/communicator.h"
#include "engine/options.h"
#include "format/format.h"
#include "mapping/state_dict.h"
#include "mapping/strict.h"

namespace distckpt {

struct LoadResult {
  Node state_dict;       // common ∪ loaded shards (as Tensors / values) ∪ nonpersistent
  KeyMismatch mismatch;  // filled for return_* modes
  LoadSummary summary;
};

LoadResult Load(const Node& request, const std::string& dir, Communicator& comm,
                const LoadOptions& options = {});
// The same load from this rank's reader of a checkpoint the caller opened
// (OpenCheckpoint, engine/metadata_api.h), e.g. to read its common state
// before building the request: the checkpoint is opened once. Every rank
// passes its own reader; `options.env` is not used (the reader has its Env).
LoadResult Load(const Node& request, CheckpointReader& reader, Communicator& comm,
                const LoadOptions& options = {});

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_LOAD_H_
