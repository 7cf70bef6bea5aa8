#include "harness/spec/gpt_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "harness/spec/limits.h"

namespace distckpt {
namespace {

using nlohmann::json;

// Sizes up to kMaxScenarioSize, layer and expert counts up to
// kMaxScenarioCount (harness/spec/limits.h).
void SetInt(const json& j, const std::string& path, const char* name, int64_t& out, int64_t min,
            int64_t max = kMaxScenarioSize) {
  if (!j.contains(name)) return;
  if (!j[name].is_number_integer() || j[name].get<int64_t>() < min ||
      j[name].get<int64_t>() > max) {
    Fail(ErrorKind::kInvalidArgument, "{}.{}: expected an integer from {} to {}", path, name, min,
         max);
  }
  out = j[name].get<int64_t>();
}

void SetBool(const json& j, const std::string& path, const char* name, bool& out) {
  if (!j.contains(name)) return;
  if (!j[name].is_boolean())
    Fail(ErrorKind::kInvalidArgument, "{}.{}: expected true or false", path, name);
  out = j[name].get<bool>();
}

std::vector<std::vector<std::string>> ParseLayout(const json& j, const std::string& path) {
  std::vector<std::vector<std::string>> layout;
  for (size_t s = 0; s < j.size(); ++s) {
    std::string sp = fmt::format("{}[{}]", path, s);
    if (!j[s].is_array())
      Fail(ErrorKind::kInvalidArgument, "{}: expected a list of stage parts", sp);
    layout.emplace_back();
    for (const json& part : j[s]) {
      std::string name = part.is_string() ? part.get<std::string>() : "";
      if (name != "embedding" && name != "decoder" && name != "loss") {
        Fail(ErrorKind::kInvalidArgument,
             "{}: parts are \"embedding\", \"decoder\" or \"loss\", got {}", sp, part.dump());
      }
      layout.back().push_back(name);
    }
  }
  return layout;
}

void ApplyFields(GptConfig& c, const json& j, const std::string& path) {
  static const std::set<std::string> kFields{"kind",
                                             "prefix",
                                             "layers",
                                             "hidden",
                                             "ffn",
                                             "heads",
                                             "vocab",
                                             "vocab_multiple",
                                             "experts",
                                             "moe_layer_freq",
                                             "glu",
                                             "tied",
                                             "dtype",
                                             "pipeline_layout",
                                             "rename",
                                             "query_groups",
                                             "fused_norms",
                                             "norm_bias",
                                             "linear_bias",
                                             "qkv_bias",
                                             "position_embeddings",
                                             "extra_state",
                                             "output_extra_state",
                                             "rerun_state",
                                             "router_bias",
                                             "expert_prefix"};
  if (!j.is_object()) Fail(ErrorKind::kInvalidArgument, "{}: expected an object", path);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kFields.count(it.key()))
      Fail(ErrorKind::kInvalidArgument, "{}: unknown field '{}'", path, it.key());
  }
  if (j.contains("kind") && j["kind"] != "gpt") {
    Fail(ErrorKind::kInvalidArgument, "{}.kind: only \"gpt\" is supported, got {}", path,
         j["kind"].dump());
  }
  if (j.contains("prefix")) {
    if (!j["prefix"].is_string())
      Fail(ErrorKind::kInvalidArgument, "{}.prefix: expected a string", path);
    c.prefix = j["prefix"].get<std::string>();
  }
  SetInt(j, path, "layers", c.layers, 1, kMaxScenarioCount);
  SetInt(j, path, "hidden", c.hidden, 1);
  SetInt(j, path, "ffn", c.ffn, 1);
  SetInt(j, path, "heads", c.heads, 1);
  SetInt(j, path, "query_groups", c.query_groups, 0);
  SetInt(j, path, "vocab", c.vocab, 1);
  SetInt(j, path, "vocab_multiple", c.vocab_multiple, 1);
  SetInt(j, path, "experts", c.experts, 0, kMaxScenarioCount);
  if (c.layers * std::max<int64_t>(c.experts, 1) > kMaxScenarioLayerExperts) {
    Fail(ErrorKind::kInvalidArgument, "{}: {} layers of {} experts exceed {} expert layers", path,
         c.layers, c.experts, kMaxScenarioLayerExperts);
  }
  SetBool(j, path, "glu", c.glu);
  SetBool(j, path, "tied", c.tied);
  SetBool(j, path, "fused_norms", c.fused_norms);
  SetBool(j, path, "norm_bias", c.norm_bias);
  SetBool(j, path, "qkv_bias", c.qkv_bias);
  SetBool(j, path, "output_extra_state", c.output_extra_state);
  SetBool(j, path, "rerun_state", c.rerun_state);
  SetBool(j, path, "router_bias", c.router_bias);
  if (j.contains("expert_prefix")) {
    if (!j["expert_prefix"].is_string() || !j["expert_prefix"].get<std::string>().ends_with("."))
      Fail(ErrorKind::kInvalidArgument, "{}.expert_prefix: expected a key prefix ending in '.'",
           path);
    c.expert_prefix = j["expert_prefix"].get<std::string>();
  }
  if (j.contains("linear_bias")) {
    bool b = false;
    SetBool(j, path, "linear_bias", b);
    c.linear_bias = b ? 1 : 0;
  }
  SetInt(j, path, "position_embeddings", c.position_embeddings, 0);
  if (j.contains("extra_state")) {
    if (!j["extra_state"].is_array())
      Fail(ErrorKind::kInvalidArgument, "{}.extra_state: expected a list of module names", path);
    c.extra_state.clear();
    for (const json& m : j["extra_state"]) {
      if (!m.is_string() || m.get<std::string>().empty())
        Fail(ErrorKind::kInvalidArgument, "{}.extra_state: expected module names", path);
      c.extra_state.push_back(m.get<std::string>());
    }
  }
  if (j.contains("dtype")) {
    if (!j["dtype"].is_string())
      Fail(ErrorKind::kInvalidArgument, "{}.dtype: expected a string", path);
    c.dtype = DTypeFromName(j["dtype"].get<std::string>());
  }
  if (j.contains("pipeline_layout")) {
    const json& l = j["pipeline_layout"];
    std::string lp = path + ".pipeline_layout";
    if (!l.is_array() || l.empty()) Fail(ErrorKind::kInvalidArgument, "{}: expected a list", lp);
    // One layout (a list of stages) or a list of layouts.
    bool many = l[0].is_array() && !l[0].empty() && l[0][0].is_array();
    c.layouts.clear();
    for (size_t i = 0; i < (many ? l.size() : 1); ++i) {
      auto layout = ParseLayout(many ? l[i] : l, many ? fmt::format("{}[{}]", lp, i) : lp);
      c.layouts[static_cast<int>(layout.size())] = layout;
    }
  }
  if (j.contains("rename")) {
    if (!j["rename"].is_object())
      Fail(ErrorKind::kInvalidArgument, "{}.rename: expected an object", path);
    for (auto it = j["rename"].begin(); it != j["rename"].end(); ++it) {
      c.rename[it.key()] = it.value().get<std::string>();
    }
  }
  if (j.contains("moe_layer_freq")) c.moe_layer_freq = j["moe_layer_freq"];
  {
    const json& freq = c.moe_layer_freq;
    c.moe_layers.assign(c.layers, false);
    if (freq.is_number_integer() && freq.get<int64_t>() >= 1) {
      for (int64_t g = 0; g < c.layers; ++g) c.moe_layers[g] = g % freq.get<int64_t>() == 0;
    } else if (freq.is_array() && freq.size() == size_t(c.layers)) {
      for (int64_t g = 0; g < c.layers; ++g) c.moe_layers[g] = freq[g] == 1;
    } else {
      Fail(ErrorKind::kInvalidArgument,
           "{}.moe_layer_freq: expected a positive integer or a 0/1 list of {} layers", path,
           c.layers);
    }
  }
}

}  // namespace

bool GptConfig::homogeneous() const {
  return experts == 0 ||
         std::all_of(moe_layers.begin(), moe_layers.end(), [](bool m) { return m; });
}

GptConfig ParseGptConfig(const json& j, const std::string& path) {
  GptConfig c;
  ApplyFields(c, j, path);
  return c;
}

GptConfig ApplyGptOverrides(const GptConfig& base, const json& overrides, const std::string& path) {
  GptConfig c = base;
  ApplyFields(c, overrides, path);
  return c;
}

}  // namespace distckpt
