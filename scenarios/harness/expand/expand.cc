#include "harness/expand/expand.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "engine/common_state.h"
#include "harness/expand/fp8_section.h"
#include "optim/optimizer_state.h"

namespace distckpt {
namespace {

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
      int64_t n = Volume(t.DataShape());
      t.data = data.FlatSlice({offset, offset + n}).Reshape(t.DataShape());
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
  Shape shape = param.pieces.front().DataShape();
  for (size_t i = 1; i < param.pieces.size(); ++i) shape[0] += param.pieces[i].DataShape()[0];
  return shape;
}

// A plain ShardedTensor leaf with an empty flattened range: load drops it
// before anything else, as Megatron's load_preprocess does (docs/megatron-semantics.md
// §1.8), so it is not in the loaded state. Factory leaves are not dropped.
bool DroppedByLoad(const Param& param) {
  const ShardedTensor& t = param.pieces.front();
  return !param.is_factory() && t.flattened_range && t.flattened_range->size() == 0;
}

// A "shift" break moves the pieces' metadata after their values were
// generated where they belong (metadata only, as a corrupted layout would).
Param BreakShard(Param param, const BreakSpec& damage) {
  if (damage.kind != "shift") return param;
  for (ShardedTensor& piece : param.pieces) {
    if (damage.axis >= static_cast<int>(piece.global_offset.size())) {
      Fail(ErrorKind::kInvalidArgument, "break: key '{}' has no axis {} to shift", damage.key,
           damage.axis);
    }
    piece.global_offset[damage.axis] += damage.by;
  }
  return param;
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
    for (const ObjectParam& o : st.objects)
      index.objects.emplace(o.object.key, o.object.global_shape);
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
      for (Param& p : ExpandTensorParams(spec, topo, rank)) state.params.push_back(std::move(p));
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
    return fmt::format(
        "optimizer common_step: expected {}, got {}", s.optimizer->step,
        step && step->is<nlohmann::json>() ? step->as<nlohmann::json>().dump() : "nothing");
  }
  // param_groups: Megatron's list (or a dict of groups, as a ChainedOptimizer's {0: .., 1: ..}).
  const Node* groups = Child(*got, "param_groups");
  std::vector<std::pair<std::string, const Node*>> want;
  if (const List* l = expected.at("param_groups").get_if<List>()) {
    for (size_t i = 0; i < l->size(); ++i) want.emplace_back(std::to_string(i), &(*l)[i]);
  } else {
    for (const auto& [i, group] : expected.at("param_groups").as<Dict>())
      want.emplace_back(i, &group);
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
    if (!params || !params->is<nlohmann::json>() || params->as<nlohmann::json>() != ids || !lr ||
        !lr->is<nlohmann::json>() ||
        lr->as<nlohmann::json>() != group.at("lr").as<nlohmann::json>()) {
      return fmt::format("optimizer param_groups[{}]: params or hyper-parameters differ after load",
                         i);
    }
  }
  return std::nullopt;
}

}  // namespace

uint64_t StateBytes(const Scenario& s, const Topology& topo) {
  uint64_t bytes = 0;
  for (int rank = 0; rank < topo.world_size(); ++rank) {
    for (const Param& param : ExpandRank(s, topo, rank).params) {
      bytes +=
          static_cast<uint64_t>(Volume(DataShape(param))) * DTypeSize(param.pieces.front().dtype);
    }
  }
  return bytes;
}

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
      } else if (damage->kind == "gap") {
        it = state.params.erase(it);
      } else {  // shift, dtype: applied by BreakShard
        ++it;
      }
    }
    for (Param& p : extra) state.params.push_back(std::move(p));
  }
  Dict tensors;
  for (const Param& param : state.params) {
    const bool broken = damage && damage->rank == rank && param.key() == damage->key;
    const DType dtype =
        broken && damage->kind == "dtype" ? damage->dtype : param.pieces.front().dtype;
    Tensor data = Tensor::Empty(dtype, DataShape(param));
    int64_t offset = 0;
    for (const ShardedTensor& piece : param.pieces) {
      int64_t n = Volume(piece.DataShape());
      Tensor part = Tensor::Wrap(data.data() + offset * DTypeSize(data.dtype()), data.dtype(), {n});
      FillShard(s.seed, piece.key, LocationOf(param.logical_shape, piece), part);
      offset += n;
    }
    tensors[param.path] = LeafFor(broken ? BreakShard(param, *damage) : param, std::move(data));
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
                      const Topology& topo, int rank, const RequestOptions& options) {
  RankState state = LoadSideState(s, pair, topo, rank);
  auto dropped = [&](const std::string& key) { return pair && pair->Drops(key, rank); };
  Dict tensors;
  for (const Param& param : state.params) {
    if (dropped(param.key())) continue;
    DType dtype = param.load_dtype.value_or(param.pieces.front().dtype);
    bool zeros = param.pieces.front().allow_shape_mismatch && options.zero_fill;
    Tensor data =
        zeros ? Tensor::Zeros(dtype, DataShape(param)) : Tensor::Empty(dtype, DataShape(param));
    tensors[param.path] = LeafFor(param, std::move(data));
  }
  std::map<std::string, Shape> grids =
      options.stored_objects ? *options.stored_objects : IndexOf(s, saved).objects;
  Dict objects;
  for (ObjectParam& o : state.objects) {
    if (!options.objects || dropped(o.object.key)) continue;
    auto it = grids.find(o.object.key);
    if (it != grids.end() && it->second != o.object.global_shape) {
      const Shape& stored = it->second;
      if (!options.regrid_objects || stored.size() != o.object.global_shape.size() ||
          stored.size() != o.object.global_offset.size()) {
        continue;  // not reshardable
      }
      if (options.regridded)
        (*options.regridded)[o.path] = {o.object.global_shape, o.object.global_offset};
      for (size_t i = 0; i < stored.size(); ++i)
        o.object.global_offset[i] = stored[i] > 0 ? o.object.global_offset[i] % stored[i] : 0;
      o.object.global_shape = stored;
    }
    // A real checkpoint: only what it stores (a model saved without
    // TransformerEngine has no _extra_state; Megatron's resave after a TP/PP
    // change has no rng_state, whose grid changed).
    if (it == grids.end() && options.stored_objects) continue;
    o.object.data = nullptr;
    objects[o.path] = Node(std::move(o.object));
  }
  Dict root;
  root["tensors"] = Node(std::move(tensors));
  if (options.objects) root["objects"] = Node(std::move(objects));
  if (s.optimizer) root["optimizer"] = std::move(state.optimizer);
  if (!s.fp8.empty()) root["fp8"] = BuildFp8Request(s, pair, topo, rank);
  return Node(std::move(root));
}

std::map<std::string, Shape> StoredObjectGrids(const CheckpointMetadata& md) {
  std::map<std::string, Shape> grids;
  for (const auto& [unique_key, o] : md.objects) grids.emplace(o.key, o.global_shape);
  return grids;
}

void CheckOptimizerLoadable(const Scenario& s, const Node& saved_common, const Topology& topo) {
  if (!s.optimizer) return;
  CheckStoredOptimizerResumable(CommonToJson(saved_common), topo);
}

void CheckStoredOptimizerResumable(const nlohmann::json& common, const Topology& topo) {
  if (!common.is_object() || !common.contains("optimizer")) return;
  nlohmann::json saved = common["optimizer"];
  // Megatron records the sharding type only; the (TP, PP, EP) it was saved
  // under are its args' (checkpointing.py compares those).
  const nlohmann::json* args = common.contains("args") ? &common["args"] : nullptr;
  if (args && args->is_object() && args->contains("state")) args = &(*args)["state"];
  auto from_args = [&](const char* field, const char* arg) {
    if (!saved.is_object() || saved.contains(field) || !args || !args->is_object()) return;
    if (args->contains(arg) && (*args)[arg].is_number_integer()) saved[field] = (*args)[arg];
  };
  from_args("tp", "tensor_model_parallel_size");
  from_args("pp", "pipeline_model_parallel_size");
  from_args("ep", "expert_model_parallel_size");
  CheckOptimizerResumable(saved, topo);
  const bool experts = args && args->is_object() && args->contains("num_experts") &&
                       (*args)["num_experts"].is_number_integer() &&
                       (*args)["num_experts"].get<int64_t>() > 0;
  CheckExpertParamGroupsResumable(common["optimizer"], experts, topo);
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
    if (DroppedByLoad(param)) {
      if (got) {
        return fmt::format(
            "key '{}' (at '{}') has an empty flattened range, which load drops, but "
            "it was loaded",
            param.key(), param.path);
      }
      continue;
    }
    if (!got || !got->is<Tensor>()) {
      return fmt::format("key '{}' (at '{}') missing from the loaded state", param.key(),
                         param.path);
    }
    const Tensor& tensor = got->as<Tensor>();
    int64_t offset = 0;
    for (const ShardedTensor& piece : param.pieces) {
      int64_t n = Volume(piece.DataShape());
      Tensor part =
          Tensor::Wrap(const_cast<std::byte*>(tensor.data()) + offset * DTypeSize(tensor.dtype()),
                       tensor.dtype(), {n});
      offset += n;
      std::optional<ValueMismatch> bad = CheckShard(s.seed, piece.key, stored->second.first,
                                                    LocationOf(stored->second.second, piece), part);
      if (bad) {
        return fmt::format(
            "key '{}' element {} [index {}]: expected {}, got {} ({} elements differ)", piece.key,
            ShapeToString(bad->position), bad->global_index, bad->expected, bad->actual,
            bad->count);
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
      return fmt::format(
          "object '{}' (rank {}): expected {}, got {}", want.UniqueKey(), rank, expected.dump(),
          got && got->is<nlohmann::json>() ? got->as<nlohmann::json>().dump() : "nothing");
    }
  }
  return std::nullopt;
}

}  // namespace distckpt
