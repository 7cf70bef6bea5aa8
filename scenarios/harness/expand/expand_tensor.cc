#include "harness/expand/expand_tensor.h"

#include <fmt/format.h>

#include <algorithm>

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
    if (spec.flatten == dim || spec.stack_over == dim) return true;
    for (const auto& [axis, dims] : spec.shard) {
      if (std::find(dims.begin(), dims.end(), dim) != dims.end()) return true;
    }
    return false;
  };
  // A coordinate along an unused dim (mirrored for kReversed), with its radix.
  auto coord = [&](MeshDim d) -> std::pair<int64_t, int64_t> {
    if (used(d)) return {0, 1};
    const int64_t x =
        spec.replica == ReplicaKind::kReversed ? topo.Size(d) - 1 - c.Get(d) : c.Get(d);
    return {x, topo.Size(d)};
  };
  int64_t data = 0, data_size = 1;
  std::vector<MeshDim> plane = UsesExpertDims(spec)
                                   ? std::vector<MeshDim>{MeshDim::kEdp, MeshDim::kEp}
                                   : std::vector<MeshDim>{MeshDim::kDp, MeshDim::kCp};
  for (MeshDim d : plane) {
    auto [x, size] = coord(d);
    data = data * size + x;
    data_size *= size;
  }
  auto [pp, pp_size] = coord(MeshDim::kPp);
  auto [tp, tp_size] = coord(MeshDim::kTp);
  if (spec.replica == ReplicaKind::kFlat) return {(pp * tp_size + tp) * data_size + data};
  return {pp, tp, data};
}

FlatRange FlatRangeOf(const TensorSpec& spec, int64_t numel, int64_t parts, int64_t part) {
  int64_t n = numel / parts;
  if (!spec.flatten_jitter) {
    return {part * n, part == parts - 1 ? numel : (part + 1) * n};
  }
  // Megatron test_flattened_resharding: start = n*dp + dp, stop = n*(dp+1) + (dp+1 if dp+1 < DP
  // else 0).
  if (numel % parts != 0 || n < parts - 1) {
    Fail(ErrorKind::kInvalidArgument,
         "tensor '{}': flatten_jitter needs a local chunk of a multiple of {} elements of at "
         "least {}, got {}",
         spec.key, parts, parts * (parts - 1), numel);
  }
  return {n * part + part, n * (part + 1) + (part + 1 < parts ? part + 1 : 0)};
}

// The indices of stack axis 0 that `c` holds: contiguous blocks over the
// pp x vpp virtual stages (stage v*pp + pp_rank), or all of them.
std::vector<int64_t> StackRows(const TensorSpec& spec, const Topology& topo, const RankCoords& c) {
  const int64_t rows = spec.stack[0];
  std::vector<int64_t> out;
  if (spec.stack_over != MeshDim::kPp) {
    for (int64_t i = 0; i < rows; ++i) out.push_back(i);
    return out;
  }
  const int64_t stages = static_cast<int64_t>(topo.pp) * topo.vpp;
  if (rows % stages != 0) {
    Fail(ErrorKind::kInvalidArgument,
         "tensor '{}': stack axis of {} cannot be split into pp*vpp={} virtual pipeline stages "
         "(topology {})",
         spec.key, rows, stages, topo.ToString());
  }
  const int64_t block = rows / stages;
  for (int v = 0; v < topo.vpp; ++v) {
    const int64_t stage = static_cast<int64_t>(v) * topo.pp + c.Get(MeshDim::kPp);
    for (int64_t i = 0; i < block; ++i) out.push_back(stage * block + i);
  }
  return out;
}

// One ShardedTensor per stack index `c` holds: `inner` (the other axes)
// behind the prepended axes.
std::vector<ShardedTensor> Stacked(const TensorSpec& spec, const Topology& topo,
                                   const RankCoords& c, const ShardedTensor& inner) {
  std::vector<Shape> indices;
  for (int64_t row : StackRows(spec, topo, c)) indices.push_back({row});
  for (size_t axis = 1; axis < spec.stack.size(); ++axis) {
    std::vector<Shape> longer;
    for (const Shape& index : indices) {
      for (int64_t i = 0; i < spec.stack[axis]; ++i) {
        longer.push_back(index);
        longer.back().push_back(i);
      }
    }
    indices = std::move(longer);
  }
  std::vector<ShardedTensor> out;
  for (const Shape& index : indices) out.push_back(WithPrependedAxes(inner, spec.stack, index));
  return out;
}

}  // namespace

ShardedTensor WithPrependedAxes(ShardedTensor t, const Shape& sizes, const Shape& index) {
  t.prepend_axis_num = static_cast<int>(sizes.size());
  t.global_shape.insert(t.global_shape.begin(), sizes.begin(), sizes.end());
  t.global_offset.insert(t.global_offset.begin(), index.begin(), index.end());
  if (t.axis_fragmentations) {  // every index of a prepended axis is its own fragment
    t.axis_fragmentations->insert(t.axis_fragmentations->begin(), sizes.begin(), sizes.end());
  }
  return t;
}

std::string ParamPath(const TensorSpec& spec, const ShardedTensor& shard) {
  std::string path = spec.key;
  for (size_t i = 0; i < spec.stack.size(); ++i)
    path += "." + std::to_string(shard.global_offset[i]);
  return path;
}

Shape LogicalShape(const TensorSpec& spec) {
  Shape shape = spec.stack;
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  return shape;
}

std::vector<ShardedTensor> ExpandTensor(const TensorSpec& spec, const Topology& topo, int rank) {
  if (spec.glu) {
    // Each half expanded as its own tensor, then placed in the [W; V] tensor.
    TensorSpec half = spec;
    half.glu = false;
    half.stack.clear();
    half.shape[0] /= 2;
    ShardedTensor w = ExpandTensor(half, topo, rank).front();
    w.global_shape[0] *= 2;
    if (w.axis_fragmentations) (*w.axis_fragmentations)[0] *= 2;
    ShardedTensor v = w;
    v.global_offset[0] += half.shape[0];
    if (spec.stack.empty()) return {w, v};
    std::vector<ShardedTensor> out;
    std::vector<ShardedTensor> ws = Stacked(spec, topo, topo.Coords(rank), w);
    std::vector<ShardedTensor> vs = Stacked(spec, topo, topo.Coords(rank), v);
    for (size_t i = 0; i < ws.size(); ++i) {
      out.push_back(std::move(ws[i]));
      out.push_back(std::move(vs[i]));
    }
    return out;
  }
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
  if (!spec.stack.empty()) return Stacked(spec, topo, c, t);
  return {t};
}

std::vector<Param> ExpandTensorParams(const TensorSpec& spec, const Topology& topo, int rank) {
  std::vector<ShardedTensor> shards = ExpandTensor(spec, topo, rank);
  std::vector<Param> params;
  const size_t step = spec.glu ? 2 : 1;
  for (size_t i = 0; i < shards.size(); i += step) {
    Param p{ParamPath(spec, shards[i]), {}, LogicalShape(spec), spec.load_dtype};
    for (size_t k = i; k < i + step; ++k) p.pieces.push_back(std::move(shards[k]));
    params.push_back(std::move(p));
  }
  return params;
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

ShardLocation LocationOf(const Shape& logical_shape, const ShardedTensor& shard) {
  return {logical_shape, shard.GlobalBox(), shard.flattened_range};
}

}  // namespace distckpt
