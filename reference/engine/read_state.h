// Rank-local reading shared by Load and the metadata API: fills every
// ShardedTensor / ShardedObject leaf of a sharded tree from a checkpoint.
//
// Thread-safety: distinct trees may be read concurrently from one reader.
#ifndef DISTCKPT_ENGINE_READ_STATE_H_
#define DISTCKPT_ENGINE_READ_STATE_H_

#include "engine/options.h"
#include "format/format.h"
#include "mapping/dict_utils.h"
#include "mapping/state_dict.h"

namespace distckpt {

// Returns `sharded` with each ShardedTensor replaced by its loaded Tensor (the
// leaf's own buffer when defined, else a new one) and each ShardedObject by
// its value. Unknown keys: CheckpointError(kKeyMismatch) "<key> from model not
// in state dict: [<checkpoint keys>]" (Megatron's KeyError text).
// Up to `threads` workers read leaves concurrently (0 = one per hardware
// thread): the calling thread and idle threads of core/helper_pool.h's pool.
Node ReadShardedState(CheckpointReader& reader, const Node& sharded, VerifyPolicy policy,
                      LoadSummary* summary, int threads = 0);

// The same lookups and plans as ReadShardedState (the same errors), reading
// nothing: summary->bytes_needed counts the stored bytes a read would need.
void PlanShardedState(const CheckpointReader& reader, const Node& sharded, LoadSummary* summary);

// The stored chunks a ReadShardedState of `sharded` reads (each tensor
// leaf's plan), for CheckpointReader::PrepareReads; a leaf that fails to
// plan (an unknown key) is left out: its read reports it. Throws nothing.
std::vector<const StoredChunk*> PlannedChunks(const CheckpointReader& reader, const Node& sharded);

// Megatron's load result (docs/megatron-semantics.md §3.1): the checkpoint's `common` state ∪ the
// request's nonpersistent values ∪ `loaded`, then the factory merges;
// request-only plain values are dropped.
// `loaded` is taken by value: a caller done with it moves it in.
Node AssembleLoadResult(const nlohmann::json& common, const LoadPieces& pieces, Node loaded);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_READ_STATE_H_
