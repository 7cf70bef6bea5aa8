#include "property/oracle.h"

#include <algorithm>

namespace distckpt {

void ForEachPosition(const Box& box, const std::optional<FlatRange>& flat,
                     const std::function<void(const Shape&)>& fn) {
  int64_t volume = 1;
  for (int64_t extent : box.shape) volume *= extent;
  const int64_t begin = flat ? flat->start : 0;
  const int64_t end = flat ? flat->stop : volume;
  Shape pos(box.shape.size());
  for (int64_t i = begin; i < end; ++i) {
    int64_t rest = i;
    for (size_t d = box.shape.size(); d-- > 0;) {
      pos[d] = box.offset[d] + rest % box.shape[d];
      rest /= box.shape[d];
    }
    fn(pos);
  }
}

int64_t IndexIn(const Box& box, const Shape& pos) {
  int64_t index = 0;
  for (size_t d = 0; d < box.shape.size(); ++d) {
    const int64_t rel = pos[d] - box.offset[d];
    if (rel < 0 || rel >= box.shape[d]) return -1;
    index = index * box.shape[d] + rel;
  }
  return index;
}

int64_t IndexInShape(const Shape& shape, const Shape& pos) {
  return IndexIn(Box{Shape(shape.size(), 0), shape}, pos);
}

bool MainReplicasTile(const std::vector<std::vector<ShardedTensor>>& ranks,
                      const std::string& key) {
  std::vector<int> count;
  for (const auto& shards : ranks) {
    for (const ShardedTensor& t : shards) {
      if (t.key == key) count.resize(Volume(t.global_shape));
    }
  }
  bool inside = true;
  for (const auto& shards : ranks) {
    for (const ShardedTensor& t : shards) {
      if (t.key != key || !IsMainReplica(t.replica_id)) continue;
      ForEachPosition(t.GlobalBox(), t.flattened_range, [&](const Shape& pos) {
        const int64_t at = IndexInShape(t.global_shape, pos);
        if (at < 0)
          inside = false;
        else
          ++count[at];
      });
    }
  }
  return inside && std::all_of(count.begin(), count.end(), [](int c) { return c == 1; });
}

}  // namespace distckpt
