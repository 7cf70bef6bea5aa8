#include "optim/optimizer_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"
#include "optim/bucket_layout.h"

namespace distckpt {
namespace {

constexpr const char* kFormatNames[] = {"plain", "fully_sharded_model_space", "dp_reshardable",
                                        "fully_reshardable"};

ShardedTensor StateTensor(const ShardedTensor& model, std::string_view state) {
  ShardedTensor t = model.WithoutData();
  t.key = OptimStateKey(state, model.key);
  t.dtype = DType::kF32;
  return t;
}

// The state keys holding per-parameter tensors, main params first.
std::vector<std::string> StateNames(OptimFormat format, DType param_dtype) {
  switch (format) {
    case OptimFormat::kPlain:
      if (param_dtype == DType::kF32) return {"exp_avg", "exp_avg_sq"};
      return {"fp32_param", "exp_avg", "exp_avg_sq"};
    case OptimFormat::kFullyShardedModelSpace:
      return {"fp32_param", "exp_avg", "exp_avg_sq"};
    default:
      return {"param", "exp_avg", "exp_avg_sq"};
  }
}

void AddModelSpace(OptimFormat format, const std::vector<OptimTensor>& model, OptimizerState& out) {
  for (size_t i = 0; i < model.size(); ++i) {
    for (const std::string& state : StateNames(format, model[i].tensor.dtype)) {
      out.tensors.push_back({OptimStateKey(state, model[i].path),
                             StateTensor(model[i].tensor, state), static_cast<int>(i)});
    }
  }
}

// One of Megatron's distributed-optimizer instances: the dense parameters
// over the DP x CP group and, with ep > 1, the expert parameters over the
// expert DP group (a ChainedOptimizer of the two).
struct Instance {
  std::vector<int> members;  // indices into the model pieces
  int64_t dp = 1, dp_rank = 0;
  int64_t group_idx = 0;   // data_parallel_group_idx: rank in the instance's model-parallel group
  std::string key_prefix;  // "chained_{i}." for dp_reshardable with two instances
};

std::vector<Instance> Instances(OptimFormat format, const std::vector<OptimTensor>& model,
                                const Topology& topo, const RankCoords& c) {
  Instance dense{{},
                 static_cast<int64_t>(topo.dp) * topo.cp,
                 static_cast<int64_t>(c.dp) * topo.cp + c.cp,
                 static_cast<int64_t>(c.pp) * topo.tp + c.tp,
                 ""};
  // Expert model-parallel group (tp-ep-pp, tp fastest) and expert DP group.
  Instance expert{
      {}, topo.edp(), c.edp, (static_cast<int64_t>(c.pp) * topo.ep + c.ep) * topo.tp + c.tp, ""};
  for (size_t i = 0; i < model.size(); ++i) {
    (model[i].expert && topo.ep > 1 ? expert : dense).members.push_back(static_cast<int>(i));
  }
  std::vector<Instance> out;
  for (Instance* in : {&dense, &expert}) {
    if (!in->members.empty() || (in == &dense && expert.members.empty()))
      out.push_back(std::move(*in));
  }
  if (out.size() > 1 && format == OptimFormat::kDpReshardable) {
    for (size_t k = 0; k < out.size(); ++k) out[k].key_prefix = fmt::format("chained_{}.", k);
  }
  return out;
}

// Each parameter's part of this rank's DP slice, as a flattened range.
void AddFullyShardedModelSpace(const OptimizerConfig& config, const std::vector<OptimTensor>& model,
                               const Instance& in, OptimizerState& out) {
  std::vector<int64_t> numels;
  for (int i : in.members) numels.push_back(Volume(model[i].tensor.local_shape));
  BufferLayout layout = LayoutBuffer(numels, in.dp, config.pad_divisor, config.bucket_numel);
  for (const Bucket& bucket : layout.buckets) {
    FlatRange slice = DpSlice(bucket, in.dp, in.dp_rank);
    for (int b : bucket.params) {
      const int i = in.members[b];
      FlatRange range = layout.params[b];
      int64_t start = std::max(range.start, slice.start), stop = std::min(range.stop, slice.stop);
      if (start >= stop) continue;
      const ShardedTensor& param = model[i].tensor;
      if (param.replica_id.size() != 3) {
        Fail(ErrorKind::kInvalidArgument,
             "fully_sharded_model_space needs (PP, TP, DP) replica ids; '{}' has {} components",
             param.key, param.replica_id.size());
      }
      for (const std::string& state : StateNames(config.format, param.dtype)) {
        ShardedTensor t = StateTensor(param, state);
        t.flattened_range = FlatRange{start - range.start, stop - range.start};
        t.replica_id = {param.replica_id[0], param.replica_id[1], 0};
        out.tensors.push_back({OptimStateKey(state, model[i].path), std::move(t), i});
      }
    }
  }
}

// Bucket space: one gradient buffer per parameter dtype.
void AddDpReshardable(const OptimizerConfig& config, const std::vector<OptimTensor>& model,
                      const Instance& in, OptimizerState& out) {
  const int64_t dp = in.dp, dp_rank = in.dp_rank;
  const std::string prefix =
      fmt::format("{}optimizer.distributed.dp_group_idx_{}", in.key_prefix, in.group_idx);
  std::map<DType, std::vector<int>> by_dtype;
  for (int i : in.members) by_dtype[model[i].tensor.dtype].push_back(i);
  nlohmann::json unpadded = nlohmann::json::object();
  int gbuf = 0;
  for (const auto& [dtype, members] : by_dtype) {
    std::vector<int64_t> numels;
    for (int i : members) numels.push_back(Volume(model[i].tensor.local_shape));
    BufferLayout layout = LayoutBuffer(numels, dp, config.pad_divisor, config.bucket_numel);
    std::string gbuf_key = fmt::format("{}.gbuf_idx_{}.dtype_{}", prefix, gbuf++, DTypeName(dtype));
    nlohmann::json& sizes = unpadded[gbuf_key.substr(prefix.size() + 1)];
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const Bucket& bucket = layout.buckets[b];
      sizes.push_back(bucket.numel_unpadded);
      for (const FlatRange& seg : BucketSegments(layout, bucket, dp, dp_rank)) {
        for (const std::string& state : StateNames(config.format, dtype)) {
          ShardedTensor t;
          t.key = fmt::format("{}.bucket_idx_{}.{}", gbuf_key, b, state);
          t.dtype = DType::kF32;
          t.global_shape = {bucket.numel_unpadded};
          t.local_shape = {seg.size()};
          t.global_offset = {seg.start};
          t.replica_id = {0, 0, 0};
          out.tensors.push_back({fmt::format("{}#{}", t.key, seg.start), std::move(t)});
        }
      }
    }
  }
  ShardedObject o;
  o.key = prefix + ".per_bucket_numel_unpadded";
  o.data = unpadded;
  o.global_shape = {1};
  o.global_offset = {0};
  o.replica_id = {0, 0, dp_rank};
  out.objects.push_back({o.key, std::move(o)});
}

Node ParamGroups(const std::vector<OptimTensor>& model) {
  // Megatron's two groups: with weight decay, and without (biases, norms).
  nlohmann::json decay = nlohmann::json::array(), no_decay = nlohmann::json::array();
  for (size_t i = 0; i < model.size(); ++i) {
    const ShardedTensor& t = model[i].tensor;
    bool vector = t.global_shape.size() - t.prepend_axis_num <= 1;
    (vector ? no_decay : decay).push_back(i);
  }
  // Megatron's list of groups (common state brings a list of dicts back as
  // a List, which merges with the request's nonpersistent `params`).
  List groups;
  for (const auto& [ids, wd] : {std::pair{decay, 0.01}, std::pair{no_decay, 0.0}}) {
    Dict g;
    g["lr"] = Node(nlohmann::json(1e-3));
    g["betas"] = Node(nlohmann::json::array({0.9, 0.999}));
    g["eps"] = Node(nlohmann::json(1e-8));
    g["weight_decay"] = Node(nlohmann::json(wd));
    g["params"] = Node(LocalNonpersistentObject{ids});
    groups.push_back(Node(std::move(g)));
  }
  return Node(std::move(groups));
}

}  // namespace

OptimFormat ParseOptimFormat(std::string_view name) {
  for (size_t i = 0; i < std::size(kFormatNames); ++i) {
    if (name == kFormatNames[i]) return static_cast<OptimFormat>(i);
  }
  Fail(ErrorKind::kInvalidArgument,
       "unknown optimizer format '{}' (expected plain, fully_sharded_model_space, dp_reshardable "
       "or fully_reshardable)",
       name);
}

std::string_view OptimFormatName(OptimFormat format) {
  return kFormatNames[static_cast<int>(format)];
}

std::string OptimStateKey(std::string_view state, std::string_view model_key) {
  return fmt::format("optimizer.state.{}.{}", state, model_key);
}

int64_t CommonStep(const std::vector<int64_t>& steps) {
  for (int64_t s : steps) {
    if (s != steps.front()) {
      Fail(ErrorKind::kInvalidArgument,
           "The optimizer step differs per parameter. Mcore only supports optimizers whose step "
           "is shared across all parameters.");
    }
  }
  return steps.empty() ? 0 : steps.front();
}

OptimizerState ExpandOptimizer(const OptimizerConfig& config, const std::vector<OptimTensor>& model,
                               const Topology& topo, int rank) {
  for (const OptimTensor& p : model) {
    if (p.tensor.flattened_range) {
      Fail(ErrorKind::kInvalidArgument, "optimizer: parameter '{}' is already flattened",
           p.tensor.key);
    }
  }
  std::vector<int64_t> steps(model.size(), config.step);
  if (config.uneven_step && !steps.empty()) steps.back() += 1;
  OptimizerState out;
  Dict state;
  state["common_step"] = Node(nlohmann::json(CommonStep(steps)));
  const RankCoords c = topo.Coords(rank);
  switch (config.format) {
    case OptimFormat::kPlain:
    case OptimFormat::kFullyReshardable:
      AddModelSpace(config.format, model, out);
      break;
    case OptimFormat::kFullyShardedModelSpace:
      for (const Instance& in : Instances(config.format, model, topo, c)) {
        AddFullyShardedModelSpace(config, model, in, out);
      }
      break;
    case OptimFormat::kDpReshardable:
      for (const Instance& in : Instances(config.format, model, topo, c))
        AddDpReshardable(config, model, in, out);
      break;
  }
  Dict common;
  common["param_groups"] = ParamGroups(model);
  common["state"] = Node(std::move(state));
  common["param_state_sharding_type"] = Node(nlohmann::json(OptimFormatName(config.format)));
  common["tp"] = Node(nlohmann::json(topo.tp));
  common["pp"] = Node(nlohmann::json(topo.pp));
  if (std::any_of(model.begin(), model.end(), [](const OptimTensor& t) { return t.expert; })) {
    common["ep"] = Node(nlohmann::json(topo.ep));
  }
  out.common = Node(std::move(common));
  return out;
}

void CheckOptimizerResumable(const nlohmann::json& saved, const Topology& topo) {
  if (!saved.is_object() || saved.value("param_state_sharding_type", "") != "dp_reshardable")
    return;
  int tp = saved.value("tp", topo.tp), pp = saved.value("pp", topo.pp);
  if (tp != topo.tp || pp != topo.pp) {
    Fail(ErrorKind::kUnsupported,
         "(TP, PP) mismatch after resume (({}, {}) vs ({}, {})): not supported for "
         "DistributedOptimizer with sharding type dp_reshardable",
         tp, pp, topo.tp, topo.pp);
  }
  int ep = saved.value("ep", topo.ep);
  if (ep != topo.ep) {
    Fail(
        ErrorKind::kUnsupported,
        "EP mismatch after resume ({} vs {}): not supported for DistributedOptimizer with sharding "
        "type dp_reshardable (the expert parameters' buffers depend on EP)",
        ep, topo.ep);
  }
}

namespace {

// Every param group of `optimizer` (a torch optimizer state {"param_groups":
// [...]}, Megatron's {"optimizer": {...}} wrapper, or a chain of them).
void ForEachParamGroup(const nlohmann::json& optimizer,
                       const std::function<void(const nlohmann::json&)>& fn, int depth = 0) {
  if (!optimizer.is_object() || depth > 4) return;
  if (auto it = optimizer.find("param_groups"); it != optimizer.end() && it->is_array()) {
    for (const nlohmann::json& group : *it) fn(group);
    return;
  }
  for (const auto& [key, value] : optimizer.items()) {
    const bool member = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
    if (member || key == "optimizer") ForEachParamGroup(value, fn, depth + 1);
  }
}

}  // namespace

void CheckExpertParamGroupsResumable(const nlohmann::json& saved, bool model_has_experts,
                                     const Topology& topo) {
  bool said = false, saved_expert = false;
  ForEachParamGroup(saved, [&](const nlohmann::json& group) {
    if (!group.is_object()) return;
    auto it = group.find("is_expert_parallel");
    if (it == group.end() || !it->is_boolean()) return;
    said = true;
    saved_expert = saved_expert || it->get<bool>();
  });
  if (!said) return;
  const bool built_expert = (model_has_experts || saved_expert) && topo.ep > 1;
  if (saved_expert == built_expert) return;
  Fail(ErrorKind::kUnsupported,
       "the optimizer's param groups do not fit ep={}: the checkpoint {} expert-parallel param "
       "groups (saved with {}), and under ep={} Megatron builds {}; its load fails "
       "('Could not find parameter group with key ... in loaded checkpoint', "
       "_filter_and_reorder_param_groups)",
       topo.ep, saved_expert ? "has" : "has no", saved_expert ? "EP > 1" : "EP = 1", topo.ep,
       built_expert ? "them" : "none (experts use the dense process groups at EP = 1)");
}

}  // namespace distckpt
