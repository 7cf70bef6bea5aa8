#include "engine/load_plan.h"

#include <algorithm>

#include "core/error.h"

namespace distckpt {

TensorPlan PlanTensorLoad(const StoredTensor& stored, const ShardedTensor& request,
                          const ChunkIndex* index) {
  if (stored.global_shape.size() != request.global_shape.size() ||
      (!request.allow_shape_mismatch && stored.global_shape != request.global_shape)) {
    Fail(ErrorKind::kShapeMismatch,
         "Global shape mismatch for loaded ({}) and expected ({}) tensor for key {}",
         ShapeToString(stored.global_shape), ShapeToString(request.global_shape), request.key);
  }
  const Box want = request.GlobalBox();
  // The common case of small tensors (a norm, a bias, an expert loaded as it
  // was saved): the one stored chunk is exactly the request, inside the
  // stored shape, neither side flat: one run, planned without building boxes.
  // (The same plan as below; with an index the general path is taken.)
  if (!index && !request.flattened_range && stored.chunks.size() == 1 && !stored.chunks[0].flat &&
      stored.chunks[0].box == want && InsideShape(want, stored.global_shape)) {
    TensorPlan plan;
    plan.elements_needed = want.volume();
    if (plan.elements_needed > 0) {
      plan.chunks.push_back({0, {{0, 0, plan.elements_needed}}, plan.elements_needed});
      plan.elements_covered = plan.elements_needed;
    }
    return plan;
  }
  // With allow_shape_mismatch only the part inside the stored shape is read;
  // the rest of the destination stays zero (Megatron's trim / zero-pad).
  const Box stored_box{Shape(stored.global_shape.size(), 0), stored.global_shape};
  TensorPlan plan;
  std::optional<Box> inside = Intersect(want, stored_box);
  if (!inside) return plan;

  // Elements of the request inside the stored shape (flat requests: only
  // those of the flattened range).
  if (request.flattened_range) {
    ForEachCopyRun(want, request.flattened_range, want, std::nullopt, *inside,
                   [&](const CopyRun& run) { plan.elements_needed += run.count; });
  } else {
    plan.elements_needed = inside->volume();
  }

  auto plan_chunk = [&](size_t i) {
    const StoredChunk& chunk = stored.chunks[i];
    std::optional<Box> region = Intersect(chunk.box, *inside);
    if (!region) return;
    ChunkPlan cp;
    cp.chunk_index = i;
    ForEachCopyRun(chunk.box, chunk.flat, want, request.flattened_range, *region,
                   [&](const CopyRun& run) {
                     cp.runs.push_back(run);
                     cp.elements += run.count;
                   });
    if (cp.elements == 0) return;
    plan.elements_covered += cp.elements;
    plan.chunks.push_back(std::move(cp));
  };
  if (index) {
    for (size_t i : index->Overlapping(*inside)) plan_chunk(i);
  } else {
    // Disjoint on some axis: skipped without building a Box.
    auto disjoint = [&](const Box& box) {
      if (box.rank() != inside->rank() || box.offset.size() != box.rank()) return false;
      for (size_t a = 0; a < box.rank(); ++a) {
        if (box.offset[a] >= inside->offset[a] + inside->shape[a] ||
            inside->offset[a] >= box.offset[a] + box.shape[a]) {
          return true;
        }
      }
      return false;
    };
    for (size_t i = 0; i < stored.chunks.size(); ++i) {
      if (!disjoint(stored.chunks[i].box)) plan_chunk(i);
    }
  }
  if (plan.elements_covered > plan.elements_needed) {
    Fail(ErrorKind::kCorruption,
         "stored chunks of key '{}' overlap: {} elements of the request {} are covered more than "
         "once",
         request.key, plan.elements_covered - plan.elements_needed, want.ToString());
  }
  if (plan.elements_covered < plan.elements_needed) {
    Fail(ErrorKind::kIncomplete,
         "key '{}': {} of {} requested elements of {} are in no stored chunk (missing shards; "
         "checkpoint has {} chunks)",
         request.key, plan.elements_needed - plan.elements_covered, plan.elements_needed,
         want.ToString(), stored.chunks.size());
  }
  return plan;
}

}  // namespace distckpt
