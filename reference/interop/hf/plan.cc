// The GPT export spec and the plans of HF and per-layer Megatron tensors
// (interop/hf/plan.h).
#include "interop/hf/plan.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"

namespace distckpt {
namespace {

int64_t Get(const nlohmann::json& j, const char* field, const std::string& path) {
  if (!j.contains(field) || !j[field].is_number_integer() || j[field].get<int64_t>() <= 0) {
    Fail(ErrorKind::kInvalidArgument, "spec {}: '{}' must be a positive integer", path, field);
  }
  return j[field].get<int64_t>();
}

class Planner {
 public:
  Planner(const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored)
      : s_(spec) {
    for (const auto& [k, shape] : stored) stored_[k] = shape;
  }

  // Megatron's own names, one tensor per layer (PlanMegatronPerLayer).
  std::vector<HfTensor> PlanPerLayer() {
    std::vector<std::string> layer_names;  // local names under decoder.layers[.<i>].
    std::set<std::string> seen;
    const std::string layers = "decoder.layers.";
    for (const auto& [key, shape] : stored_) {
      if (!key.starts_with(s_.prefix)) continue;
      const std::string name = key.substr(s_.prefix.size());
      if (name.starts_with("optimizer.")) continue;
      if (!name.starts_with(layers)) {
        Whole(name, name);
        continue;
      }
      std::string local = name.substr(layers.size());
      const size_t dot = local.find('.');
      if (!local.empty() && std::isdigit(static_cast<unsigned char>(local[0])) &&
          dot != std::string::npos) {
        local = local.substr(dot + 1);
      }
      if (seen.insert(local).second) layer_names.push_back(local);
    }
    const int64_t f = s_.ffn;
    for (int64_t i = 0; i < s_.layers; ++i) {
      for (const std::string& local : layer_names) {
        auto key = LayerKeyOf(i, local);
        if (!key) continue;  // a layer without it (mixed layer kinds)
        const std::string out = fmt::format("{}{}.{}", layers, i, local);
        if (s_.glu && (local == "mlp.linear_fc1.weight" || local == "mlp.linear_fc1.bias")) {
          ExpectRows(i, local, 2 * f, fmt::format("SwiGLU ffn={} (W; V)", f));
          Layer(i, local, out + "_w", {{0, f}}, true);
          Layer(i, local, out + "_v", {{f, f}}, true);
          continue;
        }
        const Shape& shape = *Find(key->first);
        Layer(i, local, out, {{0, shape.at(key->second ? 1 : 0)}}, true);
      }
    }
    return std::move(out_);
  }

 private:
  const Shape* Find(const std::string& key) const {
    auto it = stored_.find(s_.prefix + key);
    return it == stored_.end() ? nullptr : &it->second;
  }
  [[noreturn]] void Missing(const std::string& key) const {
    Fail(ErrorKind::kKeyMismatch, "export --to hf: the checkpoint has no tensor '{}{}'", s_.prefix,
         key);
  }
  // The stored key of layer i's `name`: stacked ("decoder.layers.<name>",
  // axis 0 = layer) or per layer ("decoder.layers.<i>.<name>").
  std::optional<std::pair<std::string, bool>> LayerKeyOf(int64_t i, const std::string& name) const {
    std::string stacked = "decoder.layers." + name;
    if (const Shape* shape = Find(stacked)) {
      if (shape->empty() || (*shape)[0] != s_.layers) {
        Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has shape {}, not {} stacked layers",
             s_.prefix + stacked, ShapeToString(*shape), s_.layers);
      }
      return std::make_pair(stacked, true);
    }
    std::string single = fmt::format("decoder.layers.{}.{}", i, name);
    if (Find(single)) return std::make_pair(single, false);
    return std::nullopt;
  }
  // A layer norm's key: Megatron's local spec stores `input_layernorm.weight`
  // / `pre_mlp_layernorm.weight`; its TransformerEngine spec fuses them into
  // the next linear as `self_attention.linear_qkv.layer_norm_weight` /
  // `mlp.linear_fc1.layer_norm_weight`. Whichever the checkpoint has.
  std::string Norm(int64_t i, const std::string& name) const {
    const std::string fused = name == "input_layernorm.weight"
                                  ? "self_attention.linear_qkv.layer_norm_weight"
                                  : "mlp.linear_fc1.layer_norm_weight";
    return !LayerKeyOf(i, name) && LayerKeyOf(i, fused) ? fused : name;
  }
  void ExpectRows(int64_t i, const std::string& name, int64_t rows, const std::string& why) const {
    auto key = LayerKeyOf(i, name);
    if (!key) Missing(fmt::format("decoder.layers[.{}].{}", i, name));
    const Shape& shape = *Find(key->first);
    int64_t got = shape[key->second ? 1 : 0];
    if (got != rows) {
      Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has {} rows; {} needs {}",
           s_.prefix + key->first, got, why, rows);
    }
  }
  // HF tensor `hf` = rows `ranges` (offset, count) of layer i's `name`, in order.
  void Layer(int64_t i, const std::string& name, const std::string& hf,
             const std::vector<std::pair<int64_t, int64_t>>& ranges, bool required) {
    auto key = LayerKeyOf(i, name);
    if (!key) {
      if (required) Missing(fmt::format("decoder.layers[.{}].{}", i, name));
      return;
    }
    const Shape& shape = *Find(key->first);
    const size_t lead = key->second ? 1 : 0;
    HfTensor t;
    t.name = hf;
    Shape rest(shape.begin() + lead, shape.end());
    int64_t rows = 0;
    for (auto [offset, count] : ranges) {
      HfPiece p;
      p.key = s_.prefix + key->first;
      p.offset = Shape(shape.size(), 0);
      p.shape = shape;
      if (lead) {
        p.offset[0] = i;
        p.shape[0] = 1;
      }
      if (offset + count > rest[0]) {
        Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has {} rows, {} needed", p.key,
             rest[0], offset + count);
      }
      p.offset[lead] = offset;
      p.shape[lead] = count;
      rows += count;
      t.pieces.push_back(std::move(p));
    }
    t.shape = rest;
    t.shape[0] = rows;
    out_.push_back(std::move(t));
  }
  void Vocab(const std::string& key, const std::string& hf, bool required) {
    const Shape* shape = Find(key);
    if (!shape) {
      if (required) Missing(key);
      return;
    }
    if (shape->size() != 2 || (*shape)[0] < s_.vocab || (*shape)[1] != s_.hidden) {
      Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has shape {}; vocab={} hidden={}",
           s_.prefix + key, ShapeToString(*shape), s_.vocab, s_.hidden);
    }
    out_.push_back({hf, {s_.vocab, s_.hidden}, {{s_.prefix + key, {0, 0}, {s_.vocab, s_.hidden}}}});
  }
  void Whole(const std::string& key, const std::string& hf) {
    const Shape* shape = Find(key);
    if (!shape) Missing(key);
    out_.push_back({hf, *shape, {{s_.prefix + key, Shape(shape->size(), 0), *shape}}});
  }

  const GptExportSpec& s_;
  std::map<std::string, Shape> stored_;
  std::vector<HfTensor> out_;
};

}  // namespace

GptExportSpec GptExportSpecFromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail(ErrorKind::kInvalidArgument, "spec {}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  CheckJsonDepth(text.str(), "spec " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str(), nullptr, true, true);
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kInvalidArgument, "spec {}: not JSON: {}", path, e.what());
  }
  return GptExportSpecFromJson(std::move(j), path);
}

GptExportSpec GptExportSpecFromJson(nlohmann::json j, const std::string& path) {
  if (j.is_object() && j.contains("model")) {
    nlohmann::json model = j["model"];
    if (model.is_array() && !model.empty()) model = std::move(model[0]);
    j = std::move(model);
  }
  if (!j.is_object()) {
    Fail(ErrorKind::kInvalidArgument, "spec {}: holds a {}, not a model object", path,
         j.type_name());
  }
  auto opt_bool = [&](const char* field) {
    if (!j.contains(field) || j[field].is_null()) return false;
    if (!j[field].is_boolean()) {
      Fail(ErrorKind::kInvalidArgument, "spec {}: '{}' must be true or false", path, field);
    }
    return j[field].get<bool>();
  };
  GptExportSpec s;
  if (j.contains("prefix") && !j["prefix"].is_string()) {
    Fail(ErrorKind::kInvalidArgument, "spec {}: 'prefix' must be a string", path);
  }
  s.prefix = j.value("prefix", "");
  s.layers = Get(j, "layers", path);
  s.hidden = Get(j, "hidden", path);
  s.heads = Get(j, "heads", path);
  s.ffn = Get(j, "ffn", path);
  s.vocab = Get(j, "vocab", path);
  s.query_groups = j.contains("query_groups") ? Get(j, "query_groups", path) : s.heads;
  s.glu = opt_bool("glu");
  s.tied = opt_bool("tied");
  auto opt_int = [&](const char* field) -> int64_t {
    if (!j.contains(field) || j[field].is_null()) return 0;
    if (!j[field].is_number_integer() || j[field].get<int64_t>() < 0) {
      Fail(ErrorKind::kInvalidArgument, "spec {}: '{}' must be a non-negative integer", path,
           field);
    }
    return j[field].get<int64_t>();
  };
  auto opt_str = [&](const char* field) -> std::string {
    if (!j.contains(field)) return "";
    if (!j[field].is_string()) {
      Fail(ErrorKind::kInvalidArgument, "spec {}: '{}' must be a string", path, field);
    }
    return j[field].get<std::string>();
  };
  s.kv_channels = opt_int("kv_channels");
  s.experts = opt_int("experts");
  s.topk = opt_int("topk");
  s.normalization = opt_str("normalization");
  s.position = opt_str("position_embedding_type");
  if (j.contains("dtype") && j["dtype"].is_string()) {
    s.dtype = std::string(DTypeName(DTypeFromName(j["dtype"].get<std::string>())));
  }
  if (!s.normalization.empty() && s.normalization != "LayerNorm" && s.normalization != "RMSNorm") {
    Fail(ErrorKind::kInvalidArgument, "spec {}: normalization '{}': LayerNorm or RMSNorm", path,
         s.normalization);
  }
  if ((s.kv_channels == 0 && s.hidden % s.heads != 0) || s.heads % s.query_groups != 0) {
    Fail(ErrorKind::kInvalidArgument,
         "spec {}: hidden {} must be divisible by heads {}, heads by query_groups {}", path,
         s.hidden, s.heads, s.query_groups);
  }
  return s;
}

std::vector<HfTensor> PlanMegatronPerLayer(
    const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored) {
  return Planner(spec, stored).PlanPerLayer();
}

}  // namespace distckpt
