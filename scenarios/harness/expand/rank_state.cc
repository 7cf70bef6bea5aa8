#include "harness/expand/rank_state.h"

#include <fmt/format.h>

#include "fsdp/layout.h"
#include "harness/expand/expand_tensor.h"
#include "harness/expand/gpt_model.h"
#include "optim/optimizer_state.h"

namespace distckpt {

bool FsdpEligible(const TensorSpec& spec) {
  if (spec.flatten || spec.pad_multiple > 0 || spec.split != SplitKind::kEven ||
      spec.shape.empty() || spec.replica == ReplicaKind::kFlat || !spec.stack.empty() || spec.glu) {
    return false;
  }
  for (const auto& [axis, dims] : spec.shard) {
    for (MeshDim d : dims) {
      if (d != MeshDim::kTp && d != MeshDim::kPp) return false;
    }
  }
  return true;
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
      model.push_back(
          {p.is_factory() ? fmt::format("{}#{}", p.path, k) : p.path, p.pieces[k], -1, expert});
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

// Re-shards the FSDP-eligible tensor specs' shards (in state.params, each
// at its key: eligible specs have no stack) by `layout`.
void ApplyFsdp(const Scenario& s, FsdpLayout layout, const Topology& topo, int rank,
               RankState& state) {
  std::vector<size_t> members;
  std::vector<ShardedTensor> shards;
  for (const TensorSpec& spec : s.tensors) {
    if (!FsdpEligible(spec)) continue;
    for (size_t i = 0; i < state.params.size(); ++i) {
      if (state.params[i].path != spec.key) continue;
      members.push_back(i);
      shards.push_back(state.params[i].pieces.front());
    }
  }
  std::vector<ShardedTensor> out = ShardForFsdp(layout, shards, DenseFsdpGroup(topo, rank));
  for (size_t k = 0; k < members.size(); ++k) state.params[members[k]].pieces = {std::move(out[k])};
}

// The FSDP unit of a GPT parameter: its global layer (Megatron-FSDP wraps
// each transformer layer), -1 outside the decoder layers.
int64_t GptFsdpUnit(const GptConfig& config, const std::string& path) {
  const std::string layers = config.prefix + "decoder.layers.";
  if (!path.starts_with(layers)) return -1;
  return std::stoll(path.substr(layers.size()));
}

// Re-shards a model generator's parameters by `layout`: each parameter (a
// GLU factory's W and V halves together) over the dense or, for experts,
// the expert FSDP group.
void ApplyFsdpToModel(FsdpLayout layout, const GptConfig& config, const Topology& topo, int rank,
                      std::vector<Param>& params) {
  std::vector<FsdpParam> fsdp;
  bool experts = false;
  for (const Param& p : params) {
    const bool expert = p.path.find(".mlp.experts.") != std::string::npos;
    experts = experts || expert;
    fsdp.push_back({p.pieces, GptFsdpUnit(config, p.path), expert});
  }
  const FsdpGroup dense = DenseFsdpGroup(topo, rank);
  const FsdpGroup expert = experts ? ExpertFsdpGroup(topo, rank) : dense;
  std::vector<std::vector<ShardedTensor>> out = ShardParamsForFsdp(layout, fsdp, dense, expert);
  for (size_t i = 0; i < params.size(); ++i) params[i].pieces = std::move(out[i]);
}

}  // namespace

RankState ExpandRank(const Scenario& s, const Topology& topo, int rank,
                     const nlohmann::json& model_overrides,
                     const nlohmann::json& optimizer_overrides,
                     std::optional<FsdpLayout> fsdp_override) {
  RankState state;
  for (const TensorSpec& spec : s.tensors) {
    for (Param& p : ExpandTensorParams(spec, topo, rank)) state.params.push_back(std::move(p));
  }
  FsdpLayout fsdp = fsdp_override.value_or(s.fsdp);
  if (fsdp != FsdpLayout::kNone) ApplyFsdp(s, fsdp, topo, rank, state);
  const size_t first_model_param = state.params.size();
  for (const GptConfig& model : s.models) {
    GptConfig config =
        model_overrides.is_null() ? model : ApplyGptOverrides(model, model_overrides, "load_model");
    std::vector<Param> params = ExpandGptParams(config, topo, rank);
    if (fsdp != FsdpLayout::kNone) ApplyFsdpToModel(fsdp, config, topo, rank, params);
    for (Param& p : params) state.params.push_back(std::move(p));
    for (ObjectParam& o : ExpandGptObjects(config, s.seed, topo, rank))
      state.objects.push_back(std::move(o));
  }
  if (s.optimizer) {
    OptimizerConfig config =
        optimizer_overrides.is_null()
            ? *s.optimizer
            : ParseOptimizerConfig(optimizer_overrides, "load_optimizer", *s.optimizer, false);
    AddOptimizer(config, first_model_param, topo, rank, state);
  }
  for (const ObjectSpec& spec : s.objects) {
    state.objects.push_back({spec.key, ExpandObject(spec, s.seed, topo, rank)});
  }
  return state;
}

}  // namespace distckpt
