// Sharding validation over all ranks' metadata (docs/megatron-semantics.md §2.1,
// §2.2): metadata collection and its JSON form, the per-key driver, the
// ShardedObject checks and the common-state comparison.
#include "mapping/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/json_integer.h"
#include "mapping/dict_utils.h"
#include "mapping/py_format.h"
#include "mapping/validation_internal.h"

namespace distckpt {

namespace {

using nlohmann::json;

constexpr size_t kMaxExamples = 3;

json TensorToJson(const ShardedTensor& t) {
  json j = {{"type", "tensor"},
            {"key", t.key},
            {"dtype", DTypeName(t.dtype)},
            {"local_shape", t.local_shape},
            {"global_shape", t.global_shape},
            {"global_offset", t.global_offset},
            {"axis_fragmentations", nullptr},
            {"replica_id", t.replica_id},
            {"prepend_axis_num", t.prepend_axis_num},
            {"allow_shape_mismatch", t.allow_shape_mismatch},
            {"flattened_range", nullptr}};
  if (t.axis_fragmentations) j["axis_fragmentations"] = *t.axis_fragmentations;
  if (t.flattened_range) j["flattened_range"] = {t.flattened_range->start, t.flattened_range->stop};
  return j;
}

ShardedTensor TensorFromJson(const json& j) {
  ShardedTensor t;
  t.key = j.at("key").get<std::string>();
  t.dtype = DTypeFromName(j.at("dtype").get<std::string>());
  t.local_shape = JsonIntegers<int64_t>(j.at("local_shape"), "local_shape");
  t.global_shape = JsonIntegers<int64_t>(j.at("global_shape"), "global_shape");
  t.global_offset = JsonIntegers<int64_t>(j.at("global_offset"), "global_offset");
  if (!j.at("axis_fragmentations").is_null())
    t.axis_fragmentations = JsonIntegers<int64_t>(j["axis_fragmentations"], "axis_fragmentations");
  t.replica_id = JsonIntegers<int64_t>(j.at("replica_id"), "replica_id");
  t.prepend_axis_num = JsonInteger<int>(j.at("prepend_axis_num"), "prepend_axis_num");
  t.allow_shape_mismatch = j.at("allow_shape_mismatch").get<bool>();
  if (const json& range = j.at("flattened_range"); !range.is_null()) {
    t.flattened_range = FlatRange{JsonInteger<int64_t>(range.at(0), "flattened_range"),
                                  JsonInteger<int64_t>(range.at(1), "flattened_range")};
  }
  t.ValidateMetadataIntegrity();
  return t;
}

json ObjectToJson(const ShardedObject& o) {
  return {{"type", "object"},
          {"key", o.key},
          {"global_shape", o.global_shape},
          {"global_offset", o.global_offset},
          {"replica_id", o.replica_id}};
}

ShardedObject ObjectFromJson(const json& j) {
  ShardedObject o;
  o.key = j.at("key").get<std::string>();
  o.global_shape = JsonIntegers<int64_t>(j.at("global_shape"), "global_shape");
  o.global_offset = JsonIntegers<int64_t>(j.at("global_offset"), "global_offset");
  o.replica_id = JsonIntegers<int64_t>(j.at("replica_id"), "replica_id");
  o.ValidateMetadataIntegrity();
  return o;
}

struct RankObject {
  int rank = 0;
  const ShardedObject* object = nullptr;
};

// Megatron's _validate_objects_for_key: main replicas' unique keys must be
// distinct and as many as the grid has cells. We also name the key and
// report offsets outside the grid and examples of missing shards.
std::optional<std::string> CheckObjectKey(std::span<const RankObject> objects) {
  const ShardedObject& first = *objects[0].object;
  std::vector<std::string> unique_keys;
  std::map<std::string, int> counts;
  std::vector<std::string> duplicates;
  for (const RankObject& o : objects) {
    o.object->ValidateMetadataIntegrity();
    if (o.object->global_shape != first.global_shape) {
      return fmt::format(
          "Inconsistent global_shape for ShardedObject key {}: {} on rank {} but {} on rank {}",
          PyRepr(first.key), ShapeToString(first.global_shape), objects[0].rank,
          ShapeToString(o.object->global_shape), o.rank);
    }
    if (!IsMainReplica(o.object->replica_id)) continue;
    const Box grid{Shape(first.global_shape.size(), 0), first.global_shape};
    if (!Contains(grid, Box{o.object->global_offset, Shape(first.global_shape.size(), 1)})) {
      return fmt::format(
          "Invalid access pattern: ShardedObject {} on rank {} lies outside the global shape {}",
          PyRepr(o.object->UniqueKey()), o.rank, ShapeToString(first.global_shape));
    }
    const std::string uk = o.object->UniqueKey();
    if (++counts[uk] == 2) duplicates.push_back(PyRepr(uk));
    if (counts[uk] == 1) unique_keys.push_back(uk);
  }
  if (!duplicates.empty())
    return fmt::format("Duplicate ShardedObject keys: {}", PyList(duplicates));
  const int64_t expected = Volume(first.global_shape);
  if (static_cast<int64_t>(unique_keys.size()) == expected) return std::nullopt;
  // Every present key lies in the grid and is distinct, so some cells are empty.
  std::vector<std::string> missing;
  ShardedObject probe = first.WithoutData();
  // The first (present + k) cells hold at least k empty ones.
  const int64_t scan = std::min<int64_t>(expected, unique_keys.size() + kMaxExamples);
  for (int64_t linear = 0; linear < scan && missing.size() < kMaxExamples; ++linear) {
    int64_t rest = linear;
    for (size_t axis = first.global_shape.size(); axis-- > 0;) {
      probe.global_offset[axis] = rest % first.global_shape[axis];
      rest /= first.global_shape[axis];
    }
    if (!counts.count(probe.UniqueKey())) missing.push_back(PyRepr(probe.UniqueKey()));
  }
  return fmt::format("Invalid access pattern: {} ShardedObject are missing. (key {}, e.g. {})",
                     expected - static_cast<int64_t>(unique_keys.size()), PyRepr(first.key),
                     PyList(missing));
}

// The path as Megatron's diff prints it: a tuple of dict keys ('a') and
// list indices (0), found by walking `root`.
std::string PyPath(const Node& root, const NodePath& path, const Node** leaf) {
  std::vector<std::string> elements;
  const Node* node = &root;
  for (const std::string& element : path) {
    if (const List* list = node->get_if<List>()) {
      elements.push_back(element);
      node = &(*list)[std::stoul(element)];
    } else {
      elements.push_back(PyRepr(element));
      node = &node->at(element);
    }
  }
  if (leaf) *leaf = node;
  return PyTuple(elements);
}

std::string PyPaths(const Node& root, const std::vector<NodePath>& paths) {
  std::vector<std::string> items;
  for (const NodePath& p : paths) items.push_back(PyPath(root, p, nullptr));
  return PyList(items);
}

}  // namespace

LocalMetadata CollectLocalMetadata(const Node& sharded) {
  LocalMetadata md;
  ForEachLeaf(sharded, [&md](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) md.emplace_back(t->WithoutData());
    if (const ShardedObject* o = leaf.get_if<ShardedObject>()) md.emplace_back(o->WithoutData());
  });
  return md;
}

json LocalMetadataToJson(const LocalMetadata& md) {
  json out = json::array();
  for (const ShardedMeta& m : md) {
    if (const ShardedTensor* t = std::get_if<ShardedTensor>(&m)) {
      out.push_back(TensorToJson(*t));
    } else {
      out.push_back(ObjectToJson(std::get<ShardedObject>(m)));
    }
  }
  return out;
}

LocalMetadata LocalMetadataFromJson(const json& j) {
  LocalMetadata md;
  try {
    for (const json& entry : j) {
      const std::string type = entry.at("type").get<std::string>();
      if (type == "tensor") {
        md.emplace_back(TensorFromJson(entry));
      } else if (type == "object") {
        md.emplace_back(ObjectFromJson(entry));
      } else {
        Fail(ErrorKind::kCorruption, "Malformed sharded metadata: unknown entry type {}",
             PyRepr(type));
      }
    }
  } catch (const json::exception& e) {
    Fail(ErrorKind::kCorruption, "Malformed sharded metadata: {}", e.what());
  }
  return md;
}

std::vector<ShardRef> CollectShardRefs(const Node& sharded) {
  std::vector<ShardRef> refs;
  ForEachLeaf(sharded, [&refs](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) refs.emplace_back(t);
    if (const ShardedObject* o = leaf.get_if<ShardedObject>()) refs.emplace_back(o);
  });
  return refs;
}

std::vector<ShardRef> ShardRefs(const LocalMetadata& md) {
  std::vector<ShardRef> refs;
  refs.reserve(md.size());
  for (const ShardedMeta& m : md) {
    std::visit([&refs](const auto& x) { refs.emplace_back(&x); }, m);
  }
  return refs;
}

void ValidateShardingIntegrity(const GlobalMetadata& global_metadata) {
  std::vector<std::vector<ShardRef>> refs;
  refs.reserve(global_metadata.size());
  for (const LocalMetadata& md : global_metadata) refs.push_back(ShardRefs(md));
  ValidateShardingIntegrity(refs);
}

void ValidateShardingIntegrity(const std::vector<std::vector<ShardRef>>& global_shards) {
  // Keys in order of first appearance, as Megatron (they point into the
  // shards); each key's tensors and objects gathered in rank order into one
  // flat array per kind (a counting sort: no container per key).
  size_t total = 0;
  for (const std::vector<ShardRef>& refs : global_shards) total += refs.size();
  std::vector<const std::string*> order;
  std::unordered_map<std::string_view, uint32_t> ids;
  ids.reserve(total);
  std::vector<uint32_t> id_of;  // per ref, in (rank, position) order
  id_of.reserve(total);
  for (const std::vector<ShardRef>& refs : global_shards) {
    for (const ShardRef& ref : refs) {
      const std::string& key =
          std::visit([](const auto* x) -> const std::string& { return x->key; }, ref);
      auto [it, inserted] = ids.try_emplace(key, static_cast<uint32_t>(order.size()));
      if (inserted) order.push_back(&key);
      id_of.push_back(it->second);
    }
  }
  // begin[k] .. begin[k + 1]: key k's entries of each kind.
  std::vector<size_t> tensors_begin(order.size() + 1, 0), objects_begin(order.size() + 1, 0);
  size_t at = 0;
  for (const std::vector<ShardRef>& refs : global_shards) {
    for (const ShardRef& ref : refs) {
      auto& begin =
          std::holds_alternative<const ShardedTensor*>(ref) ? tensors_begin : objects_begin;
      ++begin[id_of[at++] + 1];
    }
  }
  for (size_t k = 0; k < order.size(); ++k) {
    tensors_begin[k + 1] += tensors_begin[k];
    objects_begin[k + 1] += objects_begin[k];
  }
  std::vector<RankTensor> tensors(tensors_begin.back());
  std::vector<RankObject> objects(objects_begin.back());
  {
    std::vector<size_t> next_tensor(tensors_begin.begin(), tensors_begin.end() - 1);
    std::vector<size_t> next_object(objects_begin.begin(), objects_begin.end() - 1);
    at = 0;
    for (size_t rank = 0; rank < global_shards.size(); ++rank) {
      for (const ShardRef& ref : global_shards[rank]) {
        const uint32_t id = id_of[at++];
        if (const ShardedTensor* const* t = std::get_if<const ShardedTensor*>(&ref)) {
          tensors[next_tensor[id]++] = {static_cast<int>(rank), *t};
        } else {
          objects[next_object[id]++] = {static_cast<int>(rank),
                                        std::get<const ShardedObject*>(ref)};
        }
      }
    }
  }
  std::vector<std::string> errors;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::span<const RankTensor> key_tensors(tensors.data() + tensors_begin[k],
                                                  tensors_begin[k + 1] - tensors_begin[k]);
    const std::span<const RankObject> key_objects(objects.data() + objects_begin[k],
                                                  objects_begin[k + 1] - objects_begin[k]);
    std::optional<std::string> error;
    try {
      if (!key_tensors.empty() && !key_objects.empty()) {
        error = fmt::format(
            "Key {} is used by a ShardedTensor on rank {} and by a ShardedObject on rank {}",
            PyRepr(*order[k]), key_tensors[0].rank, key_objects[0].rank);
      } else if (!key_objects.empty()) {
        error = CheckObjectKey(key_objects);
      } else {
        error = CheckTensorKey(key_tensors);
      }
    } catch (const CheckpointError& e) {  // an entry breaking the metadata rules
      error = e.what();
    }
    if (error) errors.push_back(std::move(*error));
  }
  if (!errors.empty()) {
    Fail(ErrorKind::kInvalidSharding, "Invalid sharding pattern validation. Errors: {}",
         fmt::join(errors, "\n"));
  }
}

std::string CommonStateDifference(int rank, const Node& rank0_common, const Node& mine) {
  const TreeDiff diff = Diff(rank0_common, mine);
  if (diff.empty()) return "";
  std::vector<std::string> mismatches;
  for (const NodePath& path : diff.mismatch) {
    const Node* left = nullptr;
    const Node* right = nullptr;
    const std::string tuple = PyPath(rank0_common, path, &left);
    PyPath(mine, path, &right);
    mismatches.push_back(
        fmt::format("({}, {}, {})", tuple, NodeTypeRepr(*left), NodeTypeRepr(*right)));
  }
  return fmt::format(
      "Rank {} common state dict differs from rank 0 common state dict. Keys only on rank 0: {}, "
      "Keys only on {}: {}, Mismatched keys: {}",
      rank, PyPaths(rank0_common, diff.only_left), rank, PyPaths(mine, diff.only_right),
      PyList(mismatches));
}

}  // namespace distckpt
