#include "scenario/expand.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/common_state.h"
#include "optim/optimizer_state.h"
#include "scenario/fp8_section.h"

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

ShardLocation LocationOf(const Shape& logical_shape, const ShardedTensor& shard) {
  return {logical_shape, shard.GlobalBox(), shard.flattened_range};
}

namespace {

// The Adam state of the model generators' parameters (state.params so far
// minus the tensor specs'), each factory piece as its own parameter.
void AddOptimizer(const OptimizerConfig& config, size_t first_model_param, const Topology& topo,
                  int rank, RankState& state) {
  std::vector<OptimTensor> model;
  std::vector<const Param*> owner;
  for (size_t i = first_model_param; i < state.params.size(); ++i) {
    const Param& p = state.params[i];
    for (size_t k = 0; k < p.pieces.size(); ++k) {
      // The GPT generator's SequentialMLP experts are Megatron's expert-parallel parameters.
      bool expert = p.path.find(".mlp.experts.") != std::string::npos;
      model.push_back({p.is_factory() ? fmt::format("{}#{}", p.path, k) : p.path, p.pieces[k], -1, expert});
      owner.push_back(&p);
    }
  }
  OptimizerState opt = ExpandOptimizer(config, model, topo, rank);
  std::vector<Param> params;
  for (OptimTensor& t : opt.tensors) {
    Shape logical = t.source >= 0 ? owner[t.source]->logical_shape : t.tensor.global_shape;
    params.push_back({t.path, {std::move(t.tensor)}, std::move(logical), std::nullopt});
  }
  for (Param& p : params) state.params.push_back(std::move(p));
  for (OptimObject& o : opt.objects) state.objects.push_back({o.path, std::move(o.object)});
  state.optimizer = std::move(opt.common);
}

bool FsdpEligible(const TensorSpec& spec) {
  if (spec.flatten || spec.pad_multiple > 0 || spec.split != SplitKind::kEven || spec.shape.empty()) {
    return false;
  }
  for (const auto& [axis, dims] : spec.shard) {
    for (MeshDim d : dims) {
      if (d != MeshDim::kTp && d != MeshDim::kPp) return false;
    }
  }
  return true;
}

// Re-shards the FSDP-eligible tensor specs' shards (all in state.params) by `layout`.
void ApplyFsdp(const Scenario& s, FsdpLayout layout, const Topology& topo, int rank, RankState& state) {
  std::vector<size_t> members;
  std::vector<ShardedTensor> shards;
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    if (!FsdpEligible(s.tensors[i])) continue;
    members.push_back(i);
    shards.push_back(state.params[i].pieces.front());
  }
  RankCoords c = topo.Coords(rank);
  std::vector<ShardedTensor> out = ShardForFsdp(layout, shards, static_cast<int64_t>(topo.dp) * topo.cp,
                                                static_cast<int64_t>(c.dp) * topo.cp + c.cp);
  for (size_t k = 0; k < members.size(); ++k) state.params[members[k]].pieces = {std::move(out[k])};
}

}  // namespace

RankState ExpandRank(const Scenario& s, const Topology& topo, int rank,
                     const nlohmann::json& model_overrides, const nlohmann::json& optimizer_overrides,
                     std::optional<FsdpLayout> fsdp_override) {
  RankState state;
  for (const TensorSpec& spec : s.tensors) {
    for (ShardedTensor& t : ExpandTensor(spec, topo, rank)) {
      state.params.push_back({spec.key, {std::move(t)}, spec.shape, spec.load_dtype});
    }
  }
  FsdpLayout fsdp = fsdp_override.value_or(s.fsdp);
  if (fsdp != FsdpLayout::kNone) ApplyFsdp(s, fsdp, topo, rank, state);
  const size_t first_model_param = state.params.size();
  for (const GptConfig& model : s.models) {
    GptConfig config = model_overrides.is_null()
                           ? model
                           : ApplyGptOverrides(model, model_overrides, "load_model");
    for (Param& p : ExpandGptParams(config, topo, rank)) state.params.push_back(std::move(p));
    for (ObjectParam& o : ExpandGptObjects(config, s.seed, topo, rank)) state.objects.push_back(std::move(o));
  }
  if (s.optimizer) {
    OptimizerConfig config = optimizer_overrides.is_null()
                                 ? *s.optimizer
                                 : ParseOptimizerConfig(optimizer_overrides, "load_optimizer",
                                                        *s.optimizer, false);
    AddOptimizer(config, first_model_param, topo, rank, state);
  }
  for (const ObjectSpec& spec : s.objects) {
    state.objects.push_back({spec.key, ExpandObject(spec, s.seed, topo, rank)});
  }
  return state;
}

namespace {

Shape LocalShape(const ShardedTensor& t) {
  return t.flattened_range ? Shape{t.flattened_range->size()} : t.local_shape;
}

// A leaf for `param` whose local data is `data` (the pieces concatenated).
// Several pieces become a ShardedTensorFactory (Megatron's GLU W/V split):
// build slices `data` into the pieces, merge concatenates them back.
Node LeafFor(const Param& param, Tensor data) {
  if (!param.is_factory()) {
    ShardedTensor t = param.pieces.front();
    t.dtype = data.dtype();
    t.data = std::move(data);
    return Node(std::move(t));
  }
  ShardedTensorFactory f;
  f.key = param.key();
  f.data = data;
  f.replica_id = param.pieces.front().replica_id;
  std::vector<ShardedTensor> pieces = param.pieces;
  f.build_fn = [pieces](const std::string&, const Tensor& data, const ReplicaId&,
                        const std::optional<FlatRange>&) {
    Dict parts;
    int64_t offset = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      ShardedTensor t = pieces[i];
      t.dtype = data.dtype();
      int64_t n = Volume(LocalShape(t));
      t.data = data.FlatSlice({offset, offset + n}).Reshape(LocalShape(t));
      offset += n;
      parts[std::to_string(i)] = Node(std::move(t));
    }
    return Node(std::move(parts));
  };
  Shape shape = data.shape();
  f.merge_fn = [shape, count = pieces.size()](const Node& loaded) {
    const Tensor& first = loaded.at("0").as<Tensor>();
    Tensor out = Tensor::Empty(first.dtype(), shape);
    size_t offset = 0;
    for (size_t i = 0; i < count; ++i) {
      const Tensor& part = loaded.at(std::to_string(i)).as<Tensor>();
      std::copy(part.data(), part.data() + part.nbytes(), out.data() + offset);
      offset += part.nbytes();
    }
    return out;
  };
  return Node(std::move(f));
}

Shape DataShape(const Param& param) {
  Shape shape = LocalShape(param.pieces.front());
  for (size_t i = 1; i < param.pieces.size(); ++i) shape[0] += LocalShape(param.pieces[i])[0];
  return shape;
}

// The keys a checkpoint saved under `saved` holds: dtype and logical shape
// of every tensor key, grid of every object key (union over ranks).
struct SavedIndex {
  std::map<std::string, std::pair<DType, Shape>> tensors;
  std::map<std::string, Shape> objects;
};

SavedIndex IndexOf(const Scenario& s, const Topology& saved) {
  SavedIndex index;
  for (int r = 0; r < saved.world_size(); ++r) {
    RankState st = ExpandRank(s, saved, r);
    for (const Param& p : st.params) {
      index.tensors.emplace(p.key(), std::make_pair(p.pieces.front().dtype, p.logical_shape));
    }
    for (const ObjectParam& o : st.objects) index.objects.emplace(o.object.key, o.object.global_shape);
  }
  return index;
}

const Node* Child(const Node& n, const std::string& k) {
  const Dict* d = n.get_if<Dict>();
  if (!d) return nullptr;
  auto it = d->find(k);
  return it == d->end() ? nullptr : &it->second;
}

// What `rank` requests under `topo`: the pair's model and optimizer overrides
// applied and its load_extra tensors added.
RankState LoadSideState(const Scenario& s, const PairSpec* pair, const Topology& topo, int rank) {
  RankState state = ExpandRank(s, topo, rank, pair ? pair->load_model : nlohmann::json(),
                               pair ? pair->load_optimizer : nlohmann::json(),
                               pair ? pair->load_fsdp : std::nullopt);
  if (pair) {
    for (const TensorSpec& spec : pair->load_extra) {
      for (ShardedTensor& t : ExpandTensor(spec, topo, rank)) {
        state.params.push_back({spec.key, {std::move(t)}, spec.shape, spec.load_dtype});
      }
    }
  }
  return state;
}

// The loaded optimizer common state: the saved step and hyper-parameters,
// and each group's `params` from the request (nonpersistent).
std::optional<std::string> CheckOptimizerCommon(const Scenario& s, const Node& expected,
                                                const Node& loaded) {
  const Node* got = Child(loaded, "optimizer");
  if (!got) return "optimizer common state missing from the loaded state";
  const Node* step = Child(*got, "state") ? Child(*Child(*got, "state"), "common_step") : nullptr;
  if (!step || !step->is<nlohmann::json>() || step->as<nlohmann::json>() != s.optimizer->step) {
    return fmt::format("optimizer common_step: expected {}, got {}", s.optimizer->step,
                       step && step->is<nlohmann::json>() ? step->as<nlohmann::json>().dump() : "nothing");
  }
  // param_groups: Megatron's list (or a dict of groups, as a ChainedOptimizer's {0: .., 1: ..}).
  const Node* groups = Child(*got, "param_groups");
  std::vector<std::pair<std::string, const Node*>> want;
  if (const List* l = expected.at("param_groups").get_if<List>()) {
    for (size_t i = 0; i < l->size(); ++i) want.emplace_back(std::to_string(i), &(*l)[i]);
  } else {
    for (const auto& [i, group] : expected.at("param_groups").as<Dict>()) want.emplace_back(i, &group);
  }
  for (const auto& [i, expected_group] : want) {
    const Node& group = *expected_group;
    const Node* g = nullptr;
    if (const List* l = groups ? groups->get_if<List>() : nullptr) {
      g = std::stoul(i) < l->size() ? &(*l)[std::stoul(i)] : nullptr;
    } else if (groups) {
      g = Child(*groups, i);
    }
    const Node* params = g ? Child(*g, "params") : nullptr;
    const Node* lr = g ? Child(*g, "lr") : nullptr;
    nlohmann::json ids = group.at("params").as<LocalNonpersistentObject>().obj;
    if (!params || !params->is<nlohmann::json>() || params->as<nlohmann::json>() != ids ||
        !lr || !lr->is<nlohmann::json>() || lr->as<nlohmann::json>() != group.at("lr").as<nlohmann::json>()) {
      return fmt::format("optimizer param_groups[{}]: params or hyper-parameters differ after load", i);
    }
  }
  return std::nullopt;
}

}  // namespace

Node BuildSaveState(const Scenario& s, const PairSpec* pair, const Topology& topo, int rank) {
  RankState state = ExpandRank(s, topo, rank);
  const BreakSpec* damage = pair && pair->break_save ? &*pair->break_save : nullptr;
  if (damage && damage->rank == rank) {
    std::vector<Param> extra;
    for (auto it = state.params.begin(); it != state.params.end();) {
      if (it->key() != damage->key) {
        ++it;
        continue;
      }
      if (damage->kind == "overlap") {
        // Also save rank+1's shard of this key as a main replica.
        for (Param& other : ExpandRank(s, topo, (rank + 1) % topo.world_size()).params) {
          if (other.key() != damage->key) continue;
          other.path += "#overlap";
          for (ShardedTensor& piece : other.pieces) piece.replica_id = {0};
          extra.push_back(std::move(other));
        }
        ++it;
      } else {
        it = state.params.erase(it);  // gap
      }
    }
    for (Param& p : extra) state.params.push_back(std::move(p));
  }
  Dict tensors;
  for (const Param& param : state.params) {
    Tensor data = Tensor::Empty(param.pieces.front().dtype, DataShape(param));
    int64_t offset = 0;
    for (const ShardedTensor& piece : param.pieces) {
      int64_t n = Volume(LocalShape(piece));
      Tensor part = Tensor::Wrap(data.data() + offset * DTypeSize(data.dtype()), data.dtype(), {n});
      FillShard(s.seed, piece.key, LocationOf(param.logical_shape, piece), part);
      offset += n;
    }
    tensors[param.path] = LeafFor(param, std::move(data));
  }
  Dict objects;
  for (ObjectParam& o : state.objects) objects[o.path] = Node(std::move(o.object));
  Dict root;
  root["tensors"] = Node(std::move(tensors));
  root["objects"] = Node(std::move(objects));
  root["common"] = Node(nlohmann::json{{"scenario", s.name}, {"seed", s.seed}});
  if (s.optimizer) root["optimizer"] = std::move(state.optimizer);
  if (!s.fp8.empty()) root["fp8"] = BuildFp8SaveState(s, topo, rank);
  return Node(std::move(root));
}

Node BuildLoadRequest(const Scenario& s, const PairSpec* pair, const Topology& saved,
                      const Topology& topo, int rank) {
  RankState state = LoadSideState(s, pair, topo, rank);
  auto dropped = [&](const std::string& key) {
    return pair && std::count(pair->load_drop.begin(), pair->load_drop.end(), key);
  };
  Dict tensors;
  for (const Param& param : state.params) {
    if (dropped(param.key())) continue;
    DType dtype = param.load_dtype.value_or(param.pieces.front().dtype);
    bool zeros = param.pieces.front().allow_shape_mismatch;
    Tensor data = zeros ? Tensor::Zeros(dtype, DataShape(param)) : Tensor::Empty(dtype, DataShape(param));
    tensors[param.path] = LeafFor(param, std::move(data));
  }
  SavedIndex index = IndexOf(s, saved);
  Dict objects;
  for (ObjectParam& o : state.objects) {
    if (dropped(o.object.key)) continue;
    auto it = index.objects.find(o.object.key);
    if (it != index.objects.end() && it->second != o.object.global_shape) continue;  // not reshardable
    o.object.data = nullptr;
    objects[o.path] = Node(std::move(o.object));
  }
  Dict root;
  root["tensors"] = Node(std::move(tensors));
  root["objects"] = Node(std::move(objects));
  if (s.optimizer) root["optimizer"] = std::move(state.optimizer);
  if (!s.fp8.empty()) root["fp8"] = BuildFp8Request(s, pair, topo, rank);
  return Node(std::move(root));
}

void CheckOptimizerLoadable(const Scenario& s, const Node& saved_common, const Topology& topo) {
  if (!s.optimizer) return;
  if (const Node* saved = Child(saved_common, "optimizer")) {
    CheckOptimizerResumable(CommonToJson(*saved), topo);
  }
}

std::optional<std::string> CheckLoaded(const Scenario& s, const PairSpec* pair,
                                       const Topology& saved, const Topology& topo, int rank,
                                       const LoadResult& loaded) {
  Node request = BuildLoadRequest(s, pair, saved, topo, rank);
  SavedIndex index = IndexOf(s, saved);
  RankState state = LoadSideState(s, pair, topo, rank);
  const Node* tensors = Child(loaded.state_dict, "tensors");
  for (const Param& param : state.params) {
    if (!Child(request.at("tensors"), param.path)) continue;  // dropped
    const Node* got = tensors ? Child(*tensors, param.path) : nullptr;
    auto stored = index.tensors.find(param.key());
    if (stored == index.tensors.end() || loaded.mismatch.unexpected.count(param.key())) {
      if (got) return fmt::format("key '{}' is not in the checkpoint but was loaded", param.key());
      continue;  // an unexpected key removed by the strict mode
    }
    if (!got || !got->is<Tensor>()) {
      return fmt::format("key '{}' (at '{}') missing from the loaded state", param.key(), param.path);
    }
    const Tensor& tensor = got->as<Tensor>();
    int64_t offset = 0;
    for (const ShardedTensor& piece : param.pieces) {
      int64_t n = Volume(LocalShape(piece));
      Tensor part = Tensor::Wrap(const_cast<std::byte*>(tensor.data()) + offset * DTypeSize(tensor.dtype()),
                                 tensor.dtype(), {n});
      offset += n;
      std::optional<ValueMismatch> bad = CheckShard(s.seed, piece.key, stored->second.first,
                                                    LocationOf(stored->second.second, piece), part);
      if (bad) {
        return fmt::format("key '{}' element {} [index {}]: expected {}, got {} ({} elements differ)",
                           piece.key, ShapeToString(bad->position), bad->global_index, bad->expected,
                           bad->actual, bad->count);
      }
    }
  }
  if (s.optimizer) {
    if (auto bad = CheckOptimizerCommon(s, state.optimizer, loaded.state_dict)) return bad;
  }
  std::map<std::string, nlohmann::json> generated;
  for (const ObjectParam& o : state.objects) generated[o.path] = o.object.data;
  const Node* objects = Child(loaded.state_dict, "objects");
  for (const auto& [path, node] : request.at("objects").as<Dict>()) {
    const ShardedObject& want = node.as<ShardedObject>();
    const Node* got = objects ? Child(*objects, path) : nullptr;
    if (!index.objects.count(want.key) || loaded.mismatch.unexpected.count(want.key)) continue;
    const nlohmann::json& expected = generated.at(path);
    if (!got || !got->is<nlohmann::json>() || got->as<nlohmann::json>() != expected) {
      return fmt::format("object '{}' (rank {}): expected {}, got {}", want.UniqueKey(), rank,
                         expected.dump(),
                         got && got->is<nlohmann::json>() ? got->as<nlohmann::json>().dump() : "nothing");
    }
  }
  return std::nullopt;
}

}  // namespace distckpt
