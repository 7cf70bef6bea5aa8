// One rank's local checkpoint as a byte string (the content of a local
// checkpoint file, engine/local_checkpoint.h): magic "DCKLOC01", the header
// length (8 bytes, little-endian), a JSON header (iteration, rank, common
// state, every ShardedTensor's metadata with the offset, length and xxHash3
// of its bytes, every ShardedObject with its value), then the tensor bytes.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_ENGINE_LOCAL_BLOB_H_
#define DISTCKPT_ENGINE_LOCAL_BLOB_H_

#include <cstdint>
#include <string>

#include "engine/options.h"
#include "mapping/state_dict.h"

namespace distckpt {

// Serializes every ShardedTensor (all replicas; each needs its data), every
// ShardedObject and the common state of `state_dict` (factories applied,
// nonpersistent values dropped).
std::string SerializeLocalState(const Node& state_dict, int64_t iteration, int rank);

// Loads `request` from a blob of `rank`'s `iteration` (both checked):
// Load's result shape (common ∪ nonpersistent ∪ loaded, factories merged).
// A requested shard not in the blob is CheckpointError(kKeyMismatch)
// naming the key and rank; a damaged blob kCorruption.
Node LoadLocalState(const std::string& blob, const Node& request, int64_t iteration, int rank,
                    LoadSummary* summary);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_LOCAL_BLOB_H_
