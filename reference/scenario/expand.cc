#include "scenario/expand.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace distckpt {
namespace {

bool UsesExpertDims(const TensorSpec& spec) {
  for (const auto& [axis, dims] : spec.shard) {
    for (MeshDim d : dims) {
      if (d == MeshDim::kEp || d == MeshDim::kEdp) return true;
    }
  }
  return spec.flatten == MeshDim::kEp || spec.flatten == MeshDim::kEdp;
}

std::string DimsProduct(const std::vector<MeshDim>& dims, const Topology& topo) {
  std::string names, sizes;
  int64_t parts = 1;
  for (MeshDim d : dims) {
    names += fmt::format("{}{}", names.empty() ? "" : "*", MeshDimName(d));
    parts *= topo.Size(d);
  }
  return fmt::format("{}={}", names, parts);
}

// Index of `coords` over `dims`, first dim most significant (nested split order).
int64_t MixedRadix(const std::vector<MeshDim>& dims, const Topology& topo, const RankCoords& c) {
  int64_t index = 0;
  for (MeshDim d : dims) index = index * topo.Size(d) + c.Get(d);
  return index;
}

int64_t Parts(const std::vector<MeshDim>& dims, const Topology& topo) {
  int64_t parts = 1;
  for (MeshDim d : dims) parts *= topo.Size(d);
  return parts;
}

Shape PaddedShape(const TensorSpec& spec, const Topology& topo) {
  Shape shape = spec.shape;
  if (spec.pad_multiple > 0) {
    auto it = spec.shard.find(0);
    int64_t multiple = spec.pad_multiple * (it == spec.shard.end() ? 1 : Parts(it->second, topo));
    shape[0] = (shape[0] + multiple - 1) / multiple * multiple;
  }
  return shape;
}

ReplicaId ReplicaOf(const TensorSpec& spec, const Topology& topo, const RankCoords& c) {
  auto used = [&](MeshDim dim) {
    if (spec.flatten == dim) return true;
    for (const auto& [axis, dims] : spec.shard) {
      if (std::find(dims.begin(), dims.end(), dim) != dims.end()) return true;
    }
    return false;
  };
  int64_t data = 0;
  std::vector<MeshDim> plane = UsesExpertDims(spec)
                                   ? std::vector<MeshDim>{MeshDim::kEdp, MeshDim::kEp}
                                   : std::vector<MeshDim>{MeshDim::kDp, MeshDim::kCp};
  for (MeshDim d : plane) {
    if (!used(d)) data = data * topo.Size(d) + c.Get(d);
  }
  return {used(MeshDim::kPp) ? 0 : c.pp, used(MeshDim::kTp) ? 0 : c.tp, data};
}

FlatRange FlatRangeOf(const TensorSpec& spec, int64_t numel, int64_t parts, int64_t part) {
  int64_t n = numel / parts;
  if (!spec.flatten_jitter) {
    return {part * n, part == parts - 1 ? numel : (part + 1) * n};
  }
  // Megatron test_flattened_resharding: start = n*dp + dp, stop = n*(dp+1) + (dp+1 if dp+1 < DP else 0).
  if (numel % parts != 0 || n < parts - 1) {
    Fail(ErrorKind::kInvalidArgument,
         "tensor '{}': flatten_jitter needs a local chunk of a multiple of {} elements of at "
         "least {}, got {}",
         spec.key, parts, parts * (parts - 1), numel);
  }
  return {n * part + part, n * (part + 1) + (part + 1 < parts ? part + 1 : 0)};
}

std::optional<DType> StoredDType(const Scenario& s, const std::string& key) {
  for (const TensorSpec& t : s.tensors) {
    if (t.key == key) return t.dtype;
  }
  return std::nullopt;
}

nlohmann::json ObjectValue(const std::string& key, uint64_t seed, const Shape& offset) {
  uint64_t h = KeyHash(key) ^ (seed * 0x9e3779b97f4a7c15ULL);
  for (int64_t o : offset) h = (h ^ static_cast<uint64_t>(o)) * 1099511628211ULL;
  return {{"key", key}, {"offset", offset}, {"value", h >> 11}};
}

}  // namespace

std::vector<ShardedTensor> ExpandTensor(const TensorSpec& spec, const Topology& topo, int rank) {
  RankCoords c = topo.Coords(rank);
  ShardedTensor t;
  t.key = spec.key;
  t.dtype = spec.dtype;
  t.global_shape = PaddedShape(spec, topo);
  t.local_shape = t.global_shape;
  t.global_offset = Shape(t.global_shape.size(), 0);
  Shape fragments(t.global_shape.size(), 1);
  for (const auto& [axis, dims] : spec.shard) {
    int64_t size = t.global_shape[axis];
    int64_t parts = Parts(dims, topo);
    int64_t part = MixedRadix(dims, topo, c);
    if (spec.split == SplitKind::kEven) {
      if (size % parts != 0) {
        Fail(ErrorKind::kInvalidArgument,
             "tensor '{}' axis {} of size {} cannot be split evenly into {} parts (topology {})",
             spec.key, axis, size, DimsProduct(dims, topo), topo.ToString());
      }
      t.local_shape[axis] = size / parts;
      t.global_offset[axis] = part * (size / parts);
      fragments[axis] = parts;
    } else {  // torch.chunk: ceil-sized chunks, trailing ones short or empty
      int64_t chunk = (size + parts - 1) / parts;
      int64_t offset = std::min(part * chunk, size);
      t.global_offset[axis] = offset;
      t.local_shape[axis] = std::max<int64_t>(0, std::min(chunk, size - offset));
    }
  }
  if (spec.split == SplitKind::kEven) t.axis_fragmentations = fragments;
  t.replica_id = ReplicaOf(spec, topo, c);
  t.allow_shape_mismatch = spec.pad_multiple > 0;  // padding depends on the topology
  if (spec.flatten) {
    int64_t parts = topo.Size(*spec.flatten);
    t.flattened_range = FlatRangeOf(spec, Volume(t.local_shape), parts, c.Get(*spec.flatten));
  }
  return {t};
}

ShardedObject ExpandObject(const ObjectSpec& spec, uint64_t seed, const Topology& topo, int rank) {
  RankCoords c = topo.Coords(rank);
  ShardedObject o;
  o.key = spec.key;
  for (MeshDim d : spec.per) {
    o.global_shape.push_back(topo.Size(d));
    o.global_offset.push_back(c.Get(d));
  }
  if (spec.per.empty()) {
    o.global_shape = {1};
    o.global_offset = {0};
  }
  int64_t replica = 0;
  for (MeshDim d : {MeshDim::kPp, MeshDim::kDp, MeshDim::kCp, MeshDim::kTp}) {
    if (std::find(spec.per.begin(), spec.per.end(), d) == spec.per.end()) {
      replica = replica * topo.Size(d) + c.Get(d);
    }
  }
  o.replica_id = {replica};
  o.data = ObjectValue(spec.key, seed, o.global_offset);
  return o;
}

ShardLocation LocationOf(const TensorSpec& spec, const ShardedTensor& shard) {
  return {spec.shape, shard.GlobalBox(), shard.flattened_range};
}

Node BuildSaveState(const Scenario& s, const PairSpec* pair, const Topology& topo, int rank) {
  const BreakSpec* damage = pair && pair->break_save ? &*pair->break_save : nullptr;
  Dict tensors;
  for (const TensorSpec& spec : s.tensors) {
    std::vector<ShardedTensor> shards = ExpandTensor(spec, topo, rank);
    if (damage && damage->key == spec.key && damage->rank == rank) {
      if (damage->kind == "gap") shards.clear();
      if (damage->kind == "overlap") {
        ShardedTensor extra = ExpandTensor(spec, topo, (rank + 1) % topo.world_size()).front();
        extra.replica_id = {0};
        shards.push_back(extra);
      }
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      ShardedTensor& t = shards[i];
      Shape local = t.flattened_range ? Shape{t.flattened_range->size()} : t.local_shape;
      t.data = Tensor::Empty(t.dtype, local);
      FillShard(s.seed, spec.key, LocationOf(spec, t), t.data);
      tensors[i == 0 ? spec.key : fmt::format("{}#{}", spec.key, i)] = Node(std::move(t));
    }
  }
  Dict objects;
  for (const ObjectSpec& spec : s.objects) {
    objects[spec.key] = Node(ExpandObject(spec, s.seed, topo, rank));
  }
  Dict root;
  root["tensors"] = Node(std::move(tensors));
  root["objects"] = Node(std::move(objects));
  root["common"] = Node(nlohmann::json{{"scenario", s.name}, {"seed", s.seed}});
  return Node(std::move(root));
}

Node BuildLoadRequest(const Scenario& s, const PairSpec* pair, const Topology& saved,
                      const Topology& topo, int rank) {
  Dict tensors;
  auto add = [&](const TensorSpec& spec) {
    for (ShardedTensor& t : ExpandTensor(spec, topo, rank)) {
      if (spec.load_dtype) t.dtype = *spec.load_dtype;
      Shape local = t.flattened_range ? Shape{t.flattened_range->size()} : t.local_shape;
      t.data = t.allow_shape_mismatch ? Tensor::Zeros(t.dtype, local) : Tensor::Empty(t.dtype, local);
      tensors[spec.key] = Node(std::move(t));
    }
  };
  for (const TensorSpec& spec : s.tensors) {
    if (pair && std::count(pair->load_drop.begin(), pair->load_drop.end(), spec.key)) continue;
    add(spec);
  }
  if (pair) {
    for (const TensorSpec& spec : pair->load_extra) add(spec);
  }
  Dict objects;
  for (const ObjectSpec& spec : s.objects) {
    if (pair && std::count(pair->load_drop.begin(), pair->load_drop.end(), spec.key)) continue;
    ShardedObject want = ExpandObject(spec, s.seed, topo, rank);
    if (want.global_shape != ExpandObject(spec, s.seed, saved, 0).global_shape) continue;
    want.data = nullptr;
    objects[spec.key] = Node(std::move(want));
  }
  Dict root;
  root["tensors"] = Node(std::move(tensors));
  root["objects"] = Node(std::move(objects));
  return Node(std::move(root));
}

std::optional<std::string> CheckLoaded(const Scenario& s, const PairSpec* pair,
                                       const Topology& saved, const Topology& topo, int rank,
                                       const LoadResult& loaded) {
  Node request = BuildLoadRequest(s, pair, saved, topo, rank);
  const Node& root = loaded.state_dict;
  auto child = [](const Node& n, const std::string& k) -> const Node* {
    const Dict* d = n.get_if<Dict>();
    if (!d) return nullptr;
    auto it = d->find(k);
    return it == d->end() ? nullptr : &it->second;
  };
  for (const auto& [key, node] : request.at("tensors").as<Dict>()) {
    if (loaded.mismatch.unexpected.count(key)) continue;
    const Node* got = child(root, "tensors") ? child(*child(root, "tensors"), key) : nullptr;
    std::optional<DType> stored = StoredDType(s, key);
    if (!stored) {
      if (got) return fmt::format("key '{}' is not in the checkpoint but was loaded", key);
      continue;  // an unexpected key removed by the strict mode
    }
    if (!got || !got->is<Tensor>()) return fmt::format("key '{}' missing from the loaded state", key);
    const ShardedTensor& want = node.as<ShardedTensor>();
    const TensorSpec* spec = nullptr;
    for (const TensorSpec& t : s.tensors) {
      if (t.key == key) spec = &t;
    }
    std::optional<ValueMismatch> bad =
        CheckShard(s.seed, key, *stored, LocationOf(*spec, want), got->as<Tensor>());
    if (bad) {
      return fmt::format("key '{}' element {} [index {}]: expected {}, got {} ({} elements differ)",
                         key, ShapeToString(bad->position), bad->global_index, bad->expected,
                         bad->actual, bad->count);
    }
  }
  for (const auto& [key, node] : request.at("objects").as<Dict>()) {
    const Node* got = child(root, "objects") ? child(*child(root, "objects"), key) : nullptr;
    const ShardedObject& want = node.as<ShardedObject>();
    nlohmann::json expected = ObjectValue(key, s.seed, want.global_offset);
    if (!got || !got->is<nlohmann::json>() || got->as<nlohmann::json>() != expected) {
      return fmt::format("object '{}' (rank {}): expected {}, got {}", want.UniqueKey(), rank,
                         expected.dump(), got && got->is<nlohmann::json>() ? got->as<nlohmann::json>().dump() : "nothing");
    }
  }
  return std::nullopt;
}

}  // namespace distckpt
