// Scenario -> scenario file JSON: the inverse of Scenario::FromJson (spec.cc).
// Default values are left out, so a written file reads like a written-by-hand one.
#include "harness/spec/fp8_parse.h"
#include "harness/spec/spec.h"

namespace distckpt {
namespace {

using nlohmann::json;

json DimsToJson(const std::vector<MeshDim>& dims) {
  if (dims.size() == 1) return std::string(MeshDimName(dims[0]));
  json out = json::array();
  for (MeshDim d : dims) out.push_back(std::string(MeshDimName(d)));
  return out;
}

json FsdpToJson(FsdpLayout layout) {
  switch (layout) {
    case FsdpLayout::kMegatron:
      return {{"layout", "megatron"}};
    case FsdpLayout::kFsdp2:
      return {{"layout", "fsdp2"}};
    default:
      return {{"layout", "none"}};
  }
}

json BreakToJson(const BreakSpec& b) {
  json j = {{"key", b.key}, {"kind", b.kind}, {"rank", b.rank}};
  if (b.kind == "shift") {
    j["axis"] = b.axis;
    j["by"] = b.by;
  }
  if (b.kind == "dtype") j["dtype"] = std::string(DTypeName(b.dtype));
  return j;
}

json PairToJson(const PairSpec& pair) {
  json j = {{"save", pair.save}, {"load", pair.load}};
  if (pair.strict) j["strict"] = std::string(StrictHandlingName(*pair.strict));
  if (pair.expect_error) j["expect"] = {{"error", *pair.expect_error}};
  if (pair.expect_loaded_or_refused) j["expect"] = "loaded_or_refused";
  if (pair.damage) {
    const DamageSpec& d = *pair.damage;
    j["damage"] = d.truncate ? json{{"file", d.file}, {"truncate", *d.truncate}}
                             : json{{"file", d.file}, {"at", d.at}, {"value", d.value}};
  }
  if (pair.verify != VerifyPolicy::kWhenWhole)
    j["verify"] = std::string(VerifyPolicyName(pair.verify));
  if (pair.resave) j["resave"] = pair.resave_load ? json{{"load", *pair.resave_load}} : json(true);
  if (!pair.load_extra.empty()) {
    j["load_extra"] = json::array();
    for (const TensorSpec& t : pair.load_extra) j["load_extra"].push_back(TensorSpecToJson(t));
  }
  if (!pair.load_drop.empty()) j["load_drop"] = pair.load_drop;
  for (const auto& [key, ranks] : pair.load_drop_ranks)
    j["load_drop"].push_back({{"key", key}, {"ranks", ranks}});
  if (pair.break_save) j["break"] = BreakToJson(*pair.break_save);
  if (pair.expect_missing) j["expect_missing"] = *pair.expect_missing;
  if (pair.expect_unexpected) j["expect_unexpected"] = *pair.expect_unexpected;
  if (!pair.load_model.is_null()) j["load_model"] = pair.load_model;
  if (!pair.load_optimizer.is_null()) j["load_optimizer"] = pair.load_optimizer;
  if (pair.load_fsdp) j["load_fsdp"] = FsdpToJson(*pair.load_fsdp);
  return j;
}

json GptToJson(const GptConfig& c) {
  json j = {{"kind", "gpt"},
            {"layers", c.layers},
            {"hidden", c.hidden},
            {"ffn", c.ffn},
            {"heads", c.heads},
            {"vocab", c.vocab},
            {"vocab_multiple", c.vocab_multiple},
            {"experts", c.experts},
            {"moe_layer_freq", c.moe_layer_freq},
            {"glu", c.glu},
            {"tied", c.tied},
            {"dtype", std::string(DTypeName(c.dtype))}};
  if (!c.prefix.empty()) j["prefix"] = c.prefix;
  if (c.query_groups > 0) j["query_groups"] = c.query_groups;
  if (!c.layouts.empty()) {
    json layouts = json::array();
    for (const auto& [stages, layout] : c.layouts) layouts.push_back(layout);
    j["pipeline_layout"] = layouts;
  }
  if (!c.rename.empty()) j["rename"] = c.rename;
  // The stored-layout fields, where they differ from the generator's defaults.
  if (c.fused_norms) j["fused_norms"] = true;
  if (c.norm_bias) j["norm_bias"] = true;
  if (c.linear_bias >= 0) j["linear_bias"] = c.linear_bias == 1;
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.position_embeddings > 0) j["position_embeddings"] = c.position_embeddings;
  if (c.extra_state != GptConfig{}.extra_state) j["extra_state"] = c.extra_state;
  if (c.output_extra_state) j["output_extra_state"] = true;
  if (c.rerun_state) j["rerun_state"] = true;
  if (c.router_bias) j["router_bias"] = true;
  if (c.expert_prefix != GptConfig{}.expert_prefix) j["expert_prefix"] = c.expert_prefix;
  return j;
}

json OptimizerToJson(const OptimizerConfig& c) {
  return {{"kind", "adam"},
          {"format", std::string(OptimFormatName(c.format))},
          {"step", c.step},
          {"uneven_step", c.uneven_step},
          {"pad_divisor", c.pad_divisor},
          {"bucket_numel", c.bucket_numel}};
}

}  // namespace

json TensorSpecToJson(const TensorSpec& spec) {
  json j = {
      {"key", spec.key}, {"shape", spec.shape}, {"dtype", std::string(DTypeName(spec.dtype))}};
  if (!spec.shard.empty()) {
    j["shard"] = json::object();
    for (const auto& [axis, dims] : spec.shard) j["shard"][std::to_string(axis)] = DimsToJson(dims);
  }
  if (spec.split == SplitKind::kChunk) j["split"] = "chunk";
  if (spec.flatten) j["flatten"] = std::string(MeshDimName(*spec.flatten));
  if (spec.flatten_jitter) j["flatten_jitter"] = true;
  if (spec.pad_multiple > 0) j["pad_multiple"] = spec.pad_multiple;
  if (spec.load_dtype) j["load_dtype"] = std::string(DTypeName(*spec.load_dtype));
  if (spec.replica != ReplicaKind::kMegatron)
    j["replica"] = std::string(ReplicaKindName(spec.replica));
  if (spec.glu) j["glu"] = true;
  if (!spec.stack.empty()) {
    j["stack"] = {{"shape", spec.stack}};
    if (spec.stack_over) j["stack"]["over"] = std::string(MeshDimName(*spec.stack_over));
  }
  return j;
}

json Scenario::ToJson(const std::string& description) const {
  json j = {{"name", name}, {"seed", seed}};
  if (!description.empty()) j["description"] = description;
  if (models.size() == 1) j["model"] = GptToJson(models[0]);
  if (models.size() > 1) {
    j["model"] = json::array();
    for (const GptConfig& m : models) j["model"].push_back(GptToJson(m));
  }
  if (optimizer) j["optimizer"] = OptimizerToJson(*optimizer);
  if (fsdp != FsdpLayout::kNone) j["fsdp"] = FsdpToJson(fsdp);
  if (!fp8.empty()) j["fp8"] = Fp8SectionToJson(fp8);
  j["tensors"] = json::array();
  for (const TensorSpec& t : tensors) j["tensors"].push_back(TensorSpecToJson(t));
  if (!objects.empty()) {
    j["objects"] = json::array();
    for (const ObjectSpec& o : objects) {
      json oj = {{"key", o.key}};
      if (!o.per.empty()) oj["per"] = DimsToJson(o.per);
      j["objects"].push_back(oj);
    }
  }
  if (!topologies.empty()) j["topologies"] = topologies;
  if (!pairs.empty()) {
    j["pairs"] = json::array();
    for (const PairSpec& p : pairs) j["pairs"].push_back(PairToJson(p));
  }
  if (strict != StrictHandling::kAssumeOkUnexpected)
    j["strict"] = std::string(StrictHandlingName(strict));
  return j;
}

}  // namespace distckpt
