// import --from hf, step 1 (interop/hf/import.h): an HF model directory's
// tensors, one at a time, as chunks of one unsharded checkpoint.
#include "interop/hf/import.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"
#include "format/format.h"
#include "format/safetensors/safetensors.h"
#include "interop/hf/plan.h"
#include "interop/offline_writer.h"

namespace distckpt {
namespace {

// The tensors of an HF model directory: model.safetensors.index.json's
// weight_map, or a single model.safetensors.
class HfDir {
 public:
  HfDir(Env* env, const std::string& dir) : dir_(dir) {
    const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
    std::vector<std::string> files;
    if (env->FileExists(index_path)) {
      nlohmann::json index = ParseJson(ReadFileToString(env, index_path), index_path);
      if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
        Fail(ErrorKind::kCorruption, "{}: no weight_map object", index_path);
      }
      for (const auto& [name, file] : index["weight_map"].items()) {
        if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
          Fail(ErrorKind::kCorruption, "{}: weight_map['{}'] is not a file name in {}", index_path,
               name, dir);
        }
        files.push_back(file.get<std::string>());
      }
    } else if (env->FileExists(JoinPath(dir, "model.safetensors"))) {
      files.push_back("model.safetensors");
    } else {
      Fail(ErrorKind::kIncomplete, "{}: no model.safetensors.index.json or model.safetensors", dir);
    }
    for (const std::string& f : files) {
      if (files_.count(f)) continue;
      files_[f] = std::make_unique<SafetensorsFile>(OpenSafetensors(env, JoinPath(dir, f)));
      for (const SafetensorsEntry& e : files_[f]->entries) {
        if (!by_name_.emplace(e.name, std::make_pair(files_[f].get(), &e)).second) {
          Fail(ErrorKind::kCorruption, "{}: tensor '{}' is stored twice", dir, e.name);
        }
      }
    }
  }

  bool Has(const std::string& name) const { return by_name_.count(name) != 0; }
  const std::pair<const SafetensorsFile*, const SafetensorsEntry*>& At(
      const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      Fail(ErrorKind::kKeyMismatch, "{}: the HF model has no tensor '{}'", dir_, name);
    }
    return it->second;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : by_name_) out.push_back(name);
    return out;
  }

 private:
  static bool IsPlainFileName(const std::string& f) {
    return !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..";
  }
  std::string dir_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> by_name_;
};

// The Megatron tensors (stacked layers, unpadded vocab) an HF model of
// `spec` maps to; biases where the HF model has them.
std::vector<std::pair<std::string, Shape>> MegatronShapes(const GptExportSpec& s, const HfDir& hf) {
  const int64_t h = s.hidden, L = s.layers, d = s.head_dim();
  const int64_t qkv = s.query_groups * (s.heads / s.query_groups * d + 2 * d);
  const std::string l = "decoder.layers.";
  std::vector<std::pair<std::string, Shape>> out = {
      {"embedding.word_embeddings.weight", {s.vocab, h}},
      {"decoder.final_layernorm.weight", {h}},
      {l + "input_layernorm.weight", {L, h}},
      {l + "self_attention.linear_qkv.weight", {L, qkv, h}},
      {l + "self_attention.linear_proj.weight", {L, h, h}},
      {l + "pre_mlp_layernorm.weight", {L, h}},
      {l + "mlp.linear_fc1.weight", {L, (s.glu ? 2 : 1) * s.ffn, h}},
      {l + "mlp.linear_fc2.weight", {L, h, s.ffn}},
  };
  if (!s.tied) out.push_back({"output_layer.weight", {s.vocab, h}});
  const std::string p = "model.layers.0.";
  if (hf.Has(p + "self_attn.q_proj.bias")) {
    out.push_back({l + "self_attention.linear_qkv.bias", {L, qkv}});
  }
  if (hf.Has(p + "self_attn.o_proj.bias"))
    out.push_back({l + "self_attention.linear_proj.bias", {L, h}});
  if (hf.Has(p + "mlp.down_proj.bias")) out.push_back({l + "mlp.linear_fc2.bias", {L, h}});
  for (auto& [key, shape] : out) key = s.prefix + key;
  return out;
}

// Step 1: the HF tensors as chunks of one unsharded checkpoint in `tmp`.
// Returns the HF tensor names the model does not use.
}  // namespace

std::vector<std::string> WriteHfUnsharded(
    Env* env, const GptExportSpec& spec, const std::string& dir, const std::string& tmp,
    const std::vector<std::pair<std::string, Shape>>& megatron) {
  HfDir hf(env, dir);
  std::vector<std::pair<std::string, Shape>> stored =
      megatron.empty() ? MegatronShapes(spec, hf) : megatron;
  std::map<std::string, Shape> shape_of(stored.begin(), stored.end());
  // The HF model's config.json, when present: the top-k a MoE spec may lack (HF
  // tensors do not say it), and the architecture, which must be the one the
  // spec's model maps to.
  GptExportSpec with = spec;
  nlohmann::json config;
  const std::string config_path = JoinPath(dir, "config.json");
  if (env->FileExists(config_path))
    config = ParseJson(ReadFileToString(env, config_path), config_path);
  if (with.experts > 0 && with.topk == 0 && config.is_object() &&
      config.contains("num_experts_per_tok")) {
    const nlohmann::json& k = config["num_experts_per_tok"];
    if (!k.is_number_integer() || k.get<int64_t>() <= 0 || k.get<int64_t>() > with.experts) {
      Fail(ErrorKind::kCorruption, "{}: num_experts_per_tok {} is not a count of 1 to {} experts",
           config_path, k.dump(), with.experts);
    }
    with.topk = k.get<int64_t>();
  }
  HfExportPlan hf_plan = PlanHfExport(with, stored);
  if (config.is_object() && config.contains("model_type") && config["model_type"].is_string() &&
      config["model_type"] != hf_plan.architecture.model_type) {
    Fail(ErrorKind::kInvalidArgument,
         "{}: model_type '{}', but the spec's model is a '{}' ({}): the HF model is not this "
         "Megatron model",
         config_path, config["model_type"].get<std::string>(), hf_plan.architecture.model_type,
         hf_plan.architecture.class_name);
  }
  std::vector<HfTensor> plan = std::move(hf_plan.tensors);
  std::map<std::string, DType> dtype_of;  // Megatron key -> dtype of its first HF piece
  std::map<std::string, bool> used;
  for (const std::string& name : hf.Names()) used[name] = false;
  WriteWithOneWriter(env, tmp, NativeFormat(), CheckpointMetadata{}, [&](CheckpointWriter& w) {
    for (const HfTensor& t : plan) {
      const auto& [file, entry] = hf.At(t.name);
      used[t.name] = true;
      if (entry->shape != t.shape) {
        Fail(ErrorKind::kShapeMismatch, "{}: HF tensor '{}' has shape {}; the spec needs {}",
             file->path, t.name, ShapeToString(entry->shape), ShapeToString(t.shape));
      }
      Tensor buffer = Tensor::Empty(entry->dtype, t.shape);  // one HF tensor at a time
      file->ReadTensor(*entry, buffer.bytes());
      if (t.transpose) buffer = TransposeRows(buffer);  // GPT-2's Conv1D [in, out] back
      size_t offset = 0;
      for (const HfPiece& p : t.pieces) {
        auto [it, fresh] = dtype_of.emplace(p.key, entry->dtype);
        if (!fresh && it->second != entry->dtype) {
          Fail(ErrorKind::kInvalidArgument,
               "{}: HF tensor '{}' is {} but the other parts of '{}' are {}", file->path, t.name,
               DTypeName(entry->dtype), p.key, DTypeName(it->second));
        }
        const size_t n = static_cast<size_t>(Volume(p.shape)) * DTypeSize(entry->dtype);
        w.WriteTensorChunk(p.key, entry->dtype, shape_of.at(p.key), Box{p.offset, p.shape},
                           std::nullopt, buffer.bytes().subspan(offset, n));
        offset += n;
      }
    }
  });
  std::vector<std::string> unused;
  for (const auto& [name, u] : used) {
    if (!u) unused.push_back(name);
  }
  return unused;
}

}  // namespace distckpt
