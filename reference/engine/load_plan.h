// Load planning: which bytes of which stored chunks fill a requested shard.
//
// For a request (a ShardedTensor's global box, optional flattened range) and
// a stored tensor, PlanTensorLoad intersects the request with the stored
// chunks and lists the element runs to copy — contiguous in both the stored
// chunk and the destination — so a loader reads exactly the bytes it needs.
// It also checks coverage: every requested element inside the stored global
// shape must come from exactly one stored element.
//
// Without an index it scans every chunk of the key: O(chunks) per request.
// With a ChunkIndex of the same stored tensor (engine/chunk_index.h: build it
// once when a key serves several requests) it visits only the chunks that
// overlap the request, O(log chunks + overlaps); the plan, and any error, is
// the same either way.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_ENGINE_LOAD_PLAN_H_
#define DISTCKPT_ENGINE_LOAD_PLAN_H_

#include <cstdint>
#include <vector>

#include "core/box.h"
#include "engine/chunk_index.h"
#include "format/checkpoint_metadata.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

struct ChunkPlan {
  size_t chunk_index = 0;     // into StoredTensor::chunks
  std::vector<CopyRun> runs;  // a = stored chunk elements, b = destination elements
  int64_t elements = 0;       // sum of run counts
  friend bool operator==(const ChunkPlan&, const ChunkPlan&) = default;
};

struct TensorPlan {
  std::vector<ChunkPlan> chunks;
  int64_t elements_needed = 0;  // requested elements that lie inside the stored shape
  int64_t elements_covered = 0;
  friend bool operator==(const TensorPlan&, const TensorPlan&) = default;
};

// Throws CheckpointError: kShapeMismatch (global shape or rank differs and
// the request does not allow it), kCorruption (stored chunks overlap) or
// kIncomplete (part of the request is covered by no stored chunk), each
// naming the key and the uncovered / doubly covered region.
// Chunks are planned in increasing chunk index. `index`, when given, must
// have been built from `stored`.
TensorPlan PlanTensorLoad(const StoredTensor& stored, const ShardedTensor& request,
                          const ChunkIndex* index = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_LOAD_PLAN_H_
