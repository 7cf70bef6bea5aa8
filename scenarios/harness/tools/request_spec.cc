#include "harness/tools/request_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <set>

#include "core/error.h"

namespace distckpt {
namespace {

using nlohmann::json;

constexpr std::string_view kEmbedding = "embedding.word_embeddings.weight";
constexpr std::string_view kFinalNorm = "decoder.final_layernorm.weight";

// The prefixes of the GPT models a checkpoint holds ("" and e.g. "draft."),
// not counting the optimizer's copies of a model's keys ("optimizer.state.
// exp_avg.embedding.word_embeddings.weight" is optimizer state, not a model).
std::set<std::string> ModelPrefixes(const CheckpointMetadata& md) {
  std::set<std::string> prefixes;
  for (const auto& [key, t] : md.tensors) {
    if (key.starts_with("optimizer.")) continue;
    for (std::string_view suffix : {kEmbedding, kFinalNorm}) {
      if (key.size() >= suffix.size() && key.ends_with(suffix))
        prefixes.insert(key.substr(0, key.size() - suffix.size()));
    }
  }
  return prefixes;
}

const StoredTensor* Find(const CheckpointMetadata& md, const std::string& key) {
  auto it = md.tensors.find(key);
  return it == md.tensors.end() ? nullptr : &it->second;
}

[[noreturn]] void CannotInfer(const std::string& field, const std::string& why) {
  Fail(ErrorKind::kInvalidArgument, "--spec gpt: cannot infer '{}': {}; pass --set {}=VALUE", field,
       why, field);
}

// The size of axis `axis` counted from the end of `t`'s global shape.
int64_t FromEnd(const StoredTensor& t, size_t axis) {
  return t.global_shape.size() > axis ? t.global_shape[t.global_shape.size() - 1 - axis] : -1;
}

}  // namespace

SpecOverrides ParseSpecOverrides(const std::vector<std::string>& assignments) {
  SpecOverrides out;
  for (const std::string& a : assignments) {
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      Fail(ErrorKind::kInvalidArgument, "--set {}: expected field=value", a);
    }
    std::string value = a.substr(eq + 1);
    json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
    out[a.substr(0, eq)] = parsed.is_discarded() ? json(value) : parsed;
  }
  return out;
}

json InferGptModel(const CheckpointMetadata& md, const SpecOverrides& overrides) {
  auto given = [&](const std::string& field) { return overrides.count(field) > 0; };
  std::string prefix;
  if (given("prefix")) {
    if (!overrides.at("prefix").is_string())
      Fail(ErrorKind::kInvalidArgument, "--set prefix: expected a string");
    prefix = overrides.at("prefix").get<std::string>();
  } else {
    std::set<std::string> prefixes = ModelPrefixes(md);
    if (prefixes.empty()) {
      CannotInfer("prefix", fmt::format("no key ends in '{}' or '{}': not a GPT checkpoint",
                                        kEmbedding, kFinalNorm));
    }
    if (prefixes.size() > 1) {
      CannotInfer("prefix", fmt::format("the checkpoint holds several GPT models (prefixes '{}')",
                                        fmt::join(prefixes, "', '")));
    }
    prefix = *prefixes.begin();
  }
  auto key = [&](std::string_view name) { return prefix + std::string(name); };
  json model = {{"kind", "gpt"}};
  if (!prefix.empty()) model["prefix"] = prefix;
  auto has = [&](std::string_view name) { return Find(md, key(name)) != nullptr; };

  const StoredTensor* embedding = Find(md, key(kEmbedding));
  const StoredTensor* output = Find(md, key("output_layer.weight"));
  const StoredTensor* norm = Find(md, key(kFinalNorm));
  const StoredTensor* vocab_source = embedding ? embedding : output;
  if (vocab_source && vocab_source->global_shape.size() == 2) {
    model["vocab"] = vocab_source->global_shape[0];  // padded rows: loads pad as needed
    model["hidden"] = vocab_source->global_shape[1];
    model["dtype"] = std::string(DTypeName(vocab_source->dtype));
  } else if (norm && norm->global_shape.size() == 1) {
    model["hidden"] = norm->global_shape[0];
    model["dtype"] = std::string(DTypeName(norm->dtype));
  }
  model["tied"] = embedding != nullptr && output == nullptr;
  // Megatron's training args, when the common state holds them: the true
  // vocab and its padding multiple (the stored rows are the padded vocab).
  const json* args =
      md.common.is_object() && md.common.contains("args") ? &md.common["args"] : nullptr;
  if (args && args->is_object() && args->contains("state")) args = &(*args)["state"];
  auto arg = [&](const char* name) -> std::optional<int64_t> {
    if (!args || !args->is_object() || !args->contains(name)) return std::nullopt;
    const json& v = (*args)[name];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) return std::nullopt;
    return v.get<int64_t>();
  };
  if (auto multiple = arg("make_vocab_size_divisible_by")) model["vocab_multiple"] = *multiple;
  if (auto vocab = arg("vocab_size");
      vocab && model.contains("vocab") && *vocab <= model["vocab"].get<int64_t>()) {
    model["vocab"] = *vocab;
  }
  auto flag = [&](const char* name) -> std::optional<bool> {
    if (!args || !args->is_object() || !args->contains(name) || !(*args)[name].is_boolean())
      return std::nullopt;
    return (*args)[name].get<bool>();
  };
  // The architecture Megatron's args name (training/arguments.py); the keys
  // below decide what is stored where the args are silent.
  if (auto heads = arg("num_attention_heads")) model["heads"] = *heads;
  if (flag("group_query_attention").value_or(false)) {
    if (auto groups = arg("num_query_groups")) model["query_groups"] = *groups;
  }
  if (auto glu = flag("swiglu")) model["glu"] = *glu;

  // Layers: stacked on a prepended axis (homogeneous), or one key set per
  // global layer ("decoder.layers.<g>.", Megatron's non-homogeneous MoE).
  // Megatron-Core stores the layer norms inside the linears that follow them
  // (`self_attention.linear_qkv.layer_norm_weight`, TE and local specs alike);
  // older checkpoints and our own generator under their module names.
  const bool fused = has("decoder.layers.self_attention.linear_qkv.layer_norm_weight");
  const StoredTensor* stacked_norm =
      Find(md, key(fused ? "decoder.layers.self_attention.linear_qkv.layer_norm_weight"
                         : "decoder.layers.input_layernorm.weight"));
  const std::string per_layer = key("decoder.layers.");
  std::set<int64_t> layer_numbers, moe_layers;
  for (const auto& [k, t] : md.tensors) {
    if (!k.starts_with(per_layer)) continue;
    std::string rest = k.substr(per_layer.size());
    size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) {
      continue;
    }
    int64_t g = std::stoll(rest.substr(0, dot));
    layer_numbers.insert(g);
    if (rest.substr(dot + 1) == "mlp.router.weight") moe_layers.insert(g);
  }
  const StoredTensor* fc1 = nullptr;
  const StoredTensor* fc2 = nullptr;
  const StoredTensor* router = nullptr;
  if (stacked_norm) {
    model["layers"] = stacked_norm->global_shape.at(0);
    fc1 = Find(md, key("decoder.layers.mlp.linear_fc1.weight"));
    fc2 = Find(md, key("decoder.layers.mlp.linear_fc2.weight"));
    router = Find(md, key("decoder.layers.mlp.router.weight"));
    if (router) {
      // Megatron-Core 0.20's local SequentialMLP stores "mlp.experts.experts.*".
      const std::string experts = has("decoder.layers.mlp.experts.experts.linear_fc1.weight")
                                      ? "mlp.experts.experts."
                                      : "mlp.experts.";
      if (experts != "mlp.experts.") model["expert_prefix"] = experts;
      fc1 = Find(md, key("decoder.layers." + experts + "linear_fc1.weight"));
      fc2 = Find(md, key("decoder.layers." + experts + "linear_fc2.weight"));
      model["moe_layer_freq"] = 1;
      if (has("decoder.layers.mlp.router.bias")) model["router_bias"] = true;
    }
  } else if (!layer_numbers.empty()) {
    int64_t layers = *layer_numbers.rbegin() + 1;
    model["layers"] = layers;
    json freq = json::array();
    for (int64_t g = 0; g < layers; ++g) freq.push_back(moe_layers.count(g) ? 1 : 0);
    model["moe_layer_freq"] = freq;
    for (int64_t g = 0; g < layers && !(fc1 && router); ++g) {
      const std::string p = fmt::format("{}{}.mlp.", per_layer, g);
      if (moe_layers.count(g)) {
        router = Find(md, p + "router.weight");
        if (!fc1) fc1 = Find(md, p + "experts.linear_fc1.weight");
        if (!fc2) fc2 = Find(md, p + "experts.linear_fc2.weight");
      } else if (!fc1) {
        fc1 = Find(md, p + "linear_fc1.weight");
        fc2 = Find(md, p + "linear_fc2.weight");
      }
    }
  }
  if (fc2 && FromEnd(*fc2, 0) > 0) model["ffn"] = FromEnd(*fc2, 0);
  if (fc1 && model.contains("ffn")) {
    int64_t rows = FromEnd(*fc1, 1), ffn = model["ffn"].get<int64_t>();
    if (rows == 2 * ffn) {
      model["glu"] = true;
    } else if (rows == ffn) {
      model["glu"] = false;
    }
  }
  if (router)
    model["experts"] = FromEnd(*router, 1);
  else
    model["experts"] = 0;

  // What the layers store beyond weights, from the keys of the first layer
  // (stacked: "decoder.layers.X"; per layer: "decoder.layers.<g>.X").
  std::string first = "decoder.layers.";
  if (!stacked_norm && !layer_numbers.empty())
    first = fmt::format("decoder.layers.{}.", *layer_numbers.begin());
  auto layer_has = [&](const std::string& name) { return has(first + name); };
  bool any_fused = false;
  for (const auto& [k, t] : md.tensors) {
    if (k.starts_with(per_layer) && k.find(".layer_norm_weight") != std::string::npos)
      any_fused = true;
  }
  model["fused_norms"] = any_fused;
  const std::string input_norm =
      any_fused ? "self_attention.linear_qkv.layer_norm_" : "input_layernorm.";
  model["norm_bias"] = layer_has(input_norm + "bias") || has("decoder.final_layernorm.bias");
  const bool proj_bias = layer_has("self_attention.linear_proj.bias");
  const bool qkv_bias = layer_has("self_attention.linear_qkv.bias");
  bool fc1_bias = false;
  for (const auto& [k, t] : md.tensors) {
    if (k.starts_with(per_layer) &&
        (k.ends_with("mlp.linear_fc1.bias") || k.ends_with("experts.linear_fc1.bias")))
      fc1_bias = true;
  }
  if (fc1_bias) {
    model["linear_bias"] = true;
  } else if (!proj_bias) {
    model["linear_bias"] = false;
    model["qkv_bias"] = qkv_bias;
  }  // else the generator's default: linear_qkv, linear_proj and linear_fc2 biases
  if (const StoredTensor* pos = Find(md, key("embedding.position_embeddings.weight"));
      pos && pos->global_shape.size() == 2) {
    model["position_embeddings"] = pos->global_shape[0];
  }
  // _extra_state objects per layer module, and the output layer's.
  std::set<std::string> extra;
  bool output_extra = false;
  for (const auto& [unique, o] : md.objects) {
    if (o.key == key("output_layer._extra_state")) output_extra = true;
    if (prefix.empty() && o.key == "rerun_state_machine_state") model["rerun_state"] = true;
    if (!o.key.starts_with(per_layer) || !o.key.ends_with("._extra_state")) continue;
    std::string module = o.key.substr(per_layer.size());
    module = module.substr(0, module.size() - std::string_view("._extra_state").size());
    if (size_t dot = module.find('.');
        dot != std::string::npos && module.find_first_not_of("0123456789") == dot) {
      module = module.substr(dot + 1);  // per-layer keys: "<g>.self_attention.linear_qkv"
    }
    extra.insert(module);
  }
  model["extra_state"] = json(std::vector<std::string>(extra.begin(), extra.end()));
  model["output_extra_state"] = output_extra;

  for (const auto& [field, value] : overrides) {
    if (field != "prefix") model[field] = value;
  }
  // The args' sizes where they exist, checked against the shapes.
  auto check = [&](const char* arg_name, const char* field) {
    std::optional<int64_t> a = arg(arg_name);
    if (!a || overrides.count(field)) return;
    if (model.contains(field) && model[field].is_number_integer() &&
        model[field].get<int64_t>() != *a) {
      Fail(ErrorKind::kInvalidArgument,
           "--spec gpt: the checkpoint's args say {}={} but its tensors give {}={}; pass --set "
           "{}=VALUE",
           arg_name, *a, field, model[field].get<int64_t>(), field);
    }
    model[field] = *a;
  };
  check("num_layers", "layers");
  check("hidden_size", "hidden");
  check(model["experts"].get<int64_t>() > 0 ? "moe_ffn_hidden_size" : "ffn_hidden_size", "ffn");

  // Fields the generator needs and the shapes did not decide.
  const std::map<std::string, std::string> why = {
      {"hidden",
       fmt::format("no '{}' or '{}' of the expected rank", key(kEmbedding), key(kFinalNorm))},
      {"layers",
       fmt::format("no '{}input_layernorm.weight' or '{}<g>.*' keys", per_layer, per_layer)},
      {"ffn", "no linear_fc2 weight (dense or experts) found"},
      {"glu", "linear_fc1 rows are neither ffn nor 2*ffn"},
      {"vocab", fmt::format("no '{}' or '{}output_layer.weight'", key(kEmbedding), prefix)},
      {"heads",
       "the checkpoint stores no Megatron args with num_attention_heads, and linear_qkv is "
       "[3*hidden, hidden] for any head count, so the shapes do not decide it"},
  };
  for (const auto& [field, reason] : why) {
    if (!model.contains(field)) CannotInfer(field, reason);
  }
  return model;
}

Scenario SpecFromJson(json spec, const std::string& source, const CheckpointMetadata& md) {
  if (spec.is_object() && spec.contains("tensors") && spec["tensors"].is_array()) {
    json& tensors = spec["tensors"];
    for (size_t i = 0; i < tensors.size(); ++i) {
      json& t = tensors[i];
      if (!t.is_object() || !t.contains("key") || !t["key"].is_string()) continue;
      const std::string k = t["key"].get<std::string>();
      const StoredTensor* stored = Find(md, k);
      if (stored && !t.contains("dtype")) t["dtype"] = std::string(DTypeName(stored->dtype));
      if (t.contains("shape")) continue;
      if (!stored) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: $.tensors[{}]: key '{}' is not in the checkpoint, so its omitted shape cannot "
             "be taken from it",
             source, i, k);
      }
      size_t stack = 0;
      if (t.contains("stack") && t["stack"].is_object() && t["stack"].contains("shape") &&
          t["stack"]["shape"].is_array()) {
        stack = t["stack"]["shape"].size();
      }
      if (stack > stored->global_shape.size()) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: $.tensors[{}]: key '{}' is stored with shape {}, fewer axes than its {} stack "
             "axes",
             source, i, k, ShapeToString(stored->global_shape), stack);
      }
      t["shape"] = Shape(stored->global_shape.begin() + static_cast<std::ptrdiff_t>(stack),
                         stored->global_shape.end());
    }
  }
  return Scenario::FromJson(spec, source);
}

std::optional<json> InferOptimizer(const CheckpointMetadata& md) {
  bool any = false, distributed = false, fp32_param = false, param = false, flat = false;
  for (const auto& [k, t] : md.tensors) {
    if (!k.starts_with("optimizer.")) continue;
    any = true;
    if (k.starts_with("optimizer.distributed.") || k.find(".optimizer.distributed.") != k.npos)
      distributed = true;
    if (k.starts_with("optimizer.state.fp32_param.")) fp32_param = true;
    if (k.starts_with("optimizer.state.param.")) param = true;
    for (const StoredChunk& c : t.chunks) flat |= c.flat.has_value();
  }
  if (!any) return std::nullopt;
  // Megatron-Core 0.20's dp_reshardable buckets ("dtype_(torch.bfloat16,
  // torch.float32)", per-parameter start padding) are not what the
  // optimizer generator lays out: not requested (a load leaves them, a
  // reshard does not carry them, and verify lists them as not requested);
  // the (TP, PP) refusal still applies (CheckStoredOptimizerResumable).
  for (const auto& [k, t] : md.tensors) {
    if (k.starts_with("optimizer.distributed.") && k.find(".dtype_(") != std::string::npos)
      return std::nullopt;
  }
  // Megatron's DistributedOptimizer records its format in the common state.
  std::string format;
  if (md.common.is_object() && md.common.contains("optimizer") &&
      md.common["optimizer"].is_object()) {
    format = md.common["optimizer"].value("param_state_sharding_type", "");
  }
  if (format.empty()) {
    format = distributed  ? "dp_reshardable"
             : param      ? "fully_reshardable"
             : flat       ? "fully_sharded_model_space"
             : fp32_param ? "plain"
                          : "plain";
  }
  json opt = {{"kind", "adam"}, {"format", format}};
  if (md.common.is_object() && md.common.contains("optimizer")) {
    const json& o = md.common["optimizer"];
    if (o.is_object() && o.contains("state") && o["state"].is_object() &&
        o["state"].contains("common_step") && o["state"]["common_step"].is_number_integer()) {
      opt["step"] = o["state"]["common_step"];
    }
  }
  return opt;
}

Scenario LoadRequestSpec(const std::string& spec, const CheckpointMetadata& md,
                         const SpecOverrides& overrides) {
  if (spec == "gpt") {
    json model = InferGptModel(md, overrides);
    json scenario = {{"name", "gpt (inferred)"}, {"model", model}};
    std::optional<json> opt = InferOptimizer(md);
    if (opt) scenario["optimizer"] = *opt;
    Scenario out = Scenario::FromJson(scenario, "--spec gpt");
    out.check_stored_optimizer = !opt && md.common.is_object() && md.common.contains("optimizer");
    return out;
  }
  if (!overrides.empty()) {
    Fail(ErrorKind::kInvalidArgument, "--set applies to --spec gpt only (spec {})", spec);
  }
  return SpecFromJson(ReadScenarioJson(spec), spec, md);
}

}  // namespace distckpt
