// Checkpoint inspection without a sharded request (Megatron's
// load_tensors_metadata, load_sharded_metadata, load_common_state_dict,
// load_plain_tensors). Rank-local: no collectives.
//
// Thread-safety: pure functions of the directory.
#ifndef DISTCKPT_ENGINE_METADATA_API_H_
#define DISTCKPT_ENGINE_METADATA_API_H_

#include <memory>
#include <string>

#include "engine/options.h"
#include "format/checkpoint_metadata.h"
#include "format/format.h"
#include "mapping/state_dict.h"

namespace distckpt {

// The request for all of stored tensor `key`: an unsharded ShardedTensor
// (local == global shape, zero offsets, fragmentations 1, replica 0) in its
// stored dtype, without data.
ShardedTensor WholeTensorRequest(const std::string& key, const StoredTensor& stored);

// key -> unsharded ShardedTensor (local == global shape, zero offsets,
// fragmentations 1, replica 0, no data). Flattened (distributed-optimizer)
// tensors are reported with their original N-d global shape.
Node LoadTensorsMetadata(const std::string& dir, Env* env = nullptr);
// LoadTensorsMetadata plus every ShardedObject keyed by its unique key.
Node LoadShardedMetadata(const std::string& dir, Env* env = nullptr);
Node LoadCommonStateDict(const std::string& dir, Env* env = nullptr);

// Opens the committed checkpoint in `dir` (its format detected), for callers
// that read it more than once: LoadCommonStateDict(reader) and then
// Load(request, reader, ...) (engine/load.h) open it once.
std::unique_ptr<CheckpointReader> OpenCheckpoint(const std::string& dir, Env* env = nullptr);
// The common state dict of an open checkpoint.
Node LoadCommonStateDict(const CheckpointReader& reader);
// key -> full global Tensor in its stored dtype (common state not included).
Node LoadPlainTensors(const std::string& dir, Env* env = nullptr, LoadSummary* summary = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_METADATA_API_H_
