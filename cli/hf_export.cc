// distckpt export: a checkpoint (any topology, any format) to Hugging Face
// safetensors shards, streamed tensor by tensor (cli/hf.h).
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/hf.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"
#include "format/format.h"
#include "format/safetensors/safetensors.h"

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

  std::vector<HfTensor> Plan() {
    const int64_t h = s_.hidden, d = s_.head_dim();
    Vocab("embedding.word_embeddings.weight", "model.embed_tokens.weight", true);
    for (int64_t i = 0; i < s_.layers; ++i) {
      const std::string l = fmt::format("model.layers.{}.", i);
      Layer(i, Norm(i, "input_layernorm.weight"), l + "input_layernorm.weight", {{0, h}}, true);
      const int64_t per_group_q = s_.heads / s_.query_groups * d;
      const int64_t per = per_group_q + 2 * d;
      for (const char* suffix : {"weight", "bias"}) {
        const std::string name = std::string("self_attention.linear_qkv.") + suffix;
        const bool required = std::string_view(suffix) == "weight";
        if (!required && !LayerKeyOf(i, name)) continue;
        ExpectRows(
            i, name, s_.query_groups * per,
            fmt::format("heads={} query_groups={} head_dim={}", s_.heads, s_.query_groups, d));
        std::vector<std::pair<int64_t, int64_t>> q, k, v;
        for (int64_t g = 0; g < s_.query_groups; ++g) {
          q.push_back({g * per, per_group_q});
          k.push_back({g * per + per_group_q, d});
          v.push_back({g * per + per_group_q + d, d});
        }
        Layer(i, name, l + "self_attn.q_proj." + suffix, q, true);
        Layer(i, name, l + "self_attn.k_proj." + suffix, k, true);
        Layer(i, name, l + "self_attn.v_proj." + suffix, v, true);
      }
      Layer(i, "self_attention.linear_proj.weight", l + "self_attn.o_proj.weight", {{0, h}}, true);
      Layer(i, "self_attention.linear_proj.bias", l + "self_attn.o_proj.bias", {{0, h}}, false);
      Layer(i, Norm(i, "pre_mlp_layernorm.weight"), l + "post_attention_layernorm.weight", {{0, h}},
            true);
      if (LayerKeyOf(i, "mlp.router.weight")) {
        Fail(ErrorKind::kUnsupported,
             "export --to hf: layer {} is a MoE layer (mlp.router): "
             "only dense Llama-style models are exported",
             i);
      }
      const int64_t f = s_.ffn;
      if (s_.glu) {
        ExpectRows(i, "mlp.linear_fc1.weight", 2 * f, fmt::format("SwiGLU ffn={} (gate; up)", f));
        Layer(i, "mlp.linear_fc1.weight", l + "mlp.gate_proj.weight", {{0, f}}, true);
        Layer(i, "mlp.linear_fc1.weight", l + "mlp.up_proj.weight", {{f, f}}, true);
      } else {
        ExpectRows(i, "mlp.linear_fc1.weight", f, fmt::format("ffn={}", f));
        Layer(i, "mlp.linear_fc1.weight", l + "mlp.up_proj.weight", {{0, f}}, true);
      }
      Layer(i, "mlp.linear_fc2.weight", l + "mlp.down_proj.weight", {{0, h}}, true);
      Layer(i, "mlp.linear_fc2.bias", l + "mlp.down_proj.bias", {{0, h}}, false);
    }
    Whole("decoder.final_layernorm.weight", "model.norm.weight");
    if (!s_.tied) Vocab("output_layer.weight", "lm_head.weight", true);
    return std::move(out_);
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

// A config.json to copy: must be a JSON object (errors name the file).
std::string ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorKind::kInvalidArgument, "--config {}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  CheckJsonDepth(text.str(), "--config " + path);
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object()) Fail(ErrorKind::kInvalidArgument, "--config {}: not a JSON object", path);
  return text.str();
}

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
  if (j.contains("model")) j = j["model"].is_array() ? j["model"][0] : j["model"];
  GptExportSpec s;
  s.prefix = j.value("prefix", "");
  s.layers = Get(j, "layers", path);
  s.hidden = Get(j, "hidden", path);
  s.heads = Get(j, "heads", path);
  s.ffn = Get(j, "ffn", path);
  s.vocab = Get(j, "vocab", path);
  s.query_groups = j.contains("query_groups") ? Get(j, "query_groups", path) : s.heads;
  s.glu = j.value("glu", false);
  s.tied = j.value("tied", false);
  if (j.value("experts", 0) != 0) {
    Fail(ErrorKind::kUnsupported, "spec {}: MoE models (experts) are not exported to HF", path);
  }
  if (s.hidden % s.heads != 0 || s.heads % s.query_groups != 0) {
    Fail(ErrorKind::kInvalidArgument,
         "spec {}: hidden {} must be divisible by heads {}, heads by query_groups {}", path,
         s.hidden, s.heads, s.query_groups);
  }
  return s;
}

std::vector<HfTensor> PlanHfExport(const GptExportSpec& spec,
                                   const std::vector<std::pair<std::string, Shape>>& stored) {
  return Planner(spec, stored).Plan();
}

std::vector<HfTensor> PlanVerbatimExport(const std::vector<std::pair<std::string, Shape>>& stored) {
  std::vector<HfTensor> plan;
  for (const auto& [key, shape] : stored) {
    if (key.starts_with("optimizer.")) continue;
    plan.push_back({key, shape, {{key, Shape(shape.size(), 0), shape}}});
  }
  if (plan.empty()) {
    Fail(ErrorKind::kKeyMismatch, "export --spec names: the checkpoint holds no model tensor");
  }
  return plan;
}

std::vector<HfTensor> PlanMegatronPerLayer(
    const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored) {
  return Planner(spec, stored).PlanPerLayer();
}

ExportSource OpenExportSource(const std::string& checkpoint, Env* env) {
  ExportSource source;
  source.reader = DetectFormat(env, checkpoint).OpenReader(env, checkpoint);
  Node meta = LoadTensorsMetadata(checkpoint, env);
  for (auto& [key, node] : meta.as<Dict>()) {
    ShardedTensor& t = node.as<ShardedTensor>();
    source.shapes.emplace_back(key, t.global_shape);
    source.tensors.emplace(key, std::move(t));
  }
  return source;
}

Tensor ReadPieces(CheckpointReader& reader, const std::map<std::string, ShardedTensor>& stored,
                  const HfTensor& t, DType dtype) {
  // Before a buffer of the size the metadata claims: the files hold it.
  for (const HfPiece& p : t.pieces) CheckTensorStored(reader, reader.metadata().tensors.at(p.key));
  Tensor buffer = Tensor::Empty(dtype, t.shape);
  size_t offset = 0;
  for (const HfPiece& p : t.pieces) {
    ShardedTensor request = stored.at(p.key);
    request.dtype = dtype;
    request.local_shape = p.shape;
    request.global_offset = p.offset;
    request.axis_fragmentations.reset();
    request.flattened_range.reset();
    request.prepend_axis_num = 0;
    // Read straight into the tensor's buffer (no second copy).
    request.data = Tensor::Wrap(buffer.data() + offset, dtype, p.shape);
    Node loaded = ReadShardedState(reader, Node(Dict{{"t", Node(request)}}),
                                   VerifyPolicy::kWhenWhole, nullptr, 1);
    const Tensor& got = loaded.at("t").as<Tensor>();
    if (got.data() != buffer.data() + offset) {
      std::copy(got.data(), got.data() + got.nbytes(), buffer.data() + offset);
    }
    offset += got.nbytes();
  }
  return buffer;
}

uint64_t ParseByteSize(const std::string& text) {
  // Decimal digits, then a unit: no sign ("-1" is not 2^64 - 1), no spaces.
  uint64_t value = 0;
  const auto [digits_end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || text.empty() || text[0] < '0' || text[0] > '9') {
    Fail(ErrorKind::kInvalidArgument, "--max-shard-size: bad size '{}' (e.g. 5GB, 500MB, 1000)",
         text);
  }
  const size_t end = static_cast<size_t>(digits_end - text.data());
  std::string unit = text.substr(end);
  const std::map<std::string, uint64_t> units = {
      {"", 1},          {"B", 1},         {"KB", 1000},       {"MB", 1000000}, {"GB", 1000000000},
      {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1ull << 30}};
  auto it = units.find(unit);
  if (it == units.end() || value == 0 ||
      value > std::numeric_limits<uint64_t>::max() / it->second) {
    Fail(ErrorKind::kInvalidArgument, "--max-shard-size: bad size '{}' (e.g. 5GB, 500MB, 1000)",
         text);
  }
  return value * it->second;
}

// An HF model directory is written into a new or empty directory only: its
// fixed names (config.json, the index, model-*-of-*.safetensors) would
// replace the files of whatever is there.
void RequireEmptyExportDir(Env* env, const std::string& out) {
  if (!env->IsDirectory(out)) {
    if (env->FileExists(out))
      Fail(ErrorKind::kInvalidArgument, "export: {} is not a directory", out);
    return;
  }
  const std::vector<std::string> names = env->ListDir(out);
  if (!names.empty()) {
    Fail(ErrorKind::kInvalidArgument,
         "export --to hf: {} is not empty (it holds {}{}); export into a new or empty directory",
         out, names.front(), names.size() > 1 ? fmt::format(" and {} more", names.size() - 1) : "");
  }
}

// The files an export wrote, removed unless it finishes (Keep): a failed
// export leaves no index or shards without their config.json.
class RemoveUnlessKept {
 public:
  explicit RemoveUnlessKept(Env* env) : env_(env) {}
  ~RemoveUnlessKept() {
    for (const std::string& path : paths_) {
      try {
        env_->RemoveFile(path);
      } catch (const CheckpointError&) {  // the first error is the one reported
      }
    }
  }
  const std::string& Add(std::string path) { return paths_.emplace_back(std::move(path)); }
  void Keep() { paths_.clear(); }

 private:
  Env* env_;
  std::vector<std::string> paths_;
};

ExportSummary ExportToHf(const ExportArgs& args) {
  Env* env = Env::Default();
  RequireEmptyExportDir(env, args.out);
  const bool verbatim = args.spec == "names";
  // Read before anything is written: a bad --config leaves no shards.
  const std::string config_text =
      verbatim && !args.config.empty() ? ReadConfigFile(args.config) : std::string();
  GptExportSpec spec;
  if (!verbatim) {
    spec = args.model.is_null() ? GptExportSpecFromFile(args.spec)
                                : GptExportSpecFromJson(args.model, "--spec gpt");
  }
  const uint64_t max_shard = ParseByteSize(args.max_shard_size);
  const ExportSource source = OpenExportSource(args.checkpoint, env);
  CheckpointReader& reader = *source.reader;
  const std::map<std::string, ShardedTensor>& whole = source.tensors;
  const std::vector<std::pair<std::string, Shape>>& stored = source.shapes;
  std::vector<HfTensor> plan = verbatim ? PlanVerbatimExport(stored) : PlanHfExport(spec, stored);
  auto dtype_of = [&](const HfTensor& t) {
    return args.dtype.empty() ? whole.at(t.pieces.front().key).dtype : DTypeFromName(args.dtype);
  };
  // Shards: tensors in order, a new file when the next tensor would pass max_shard.
  std::vector<std::vector<size_t>> files(1);
  uint64_t in_file = 0, total = 0, largest = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    uint64_t bytes = static_cast<uint64_t>(Volume(plan[i].shape)) * DTypeSize(dtype_of(plan[i]));
    if (!files.back().empty() && in_file + bytes > max_shard) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(i);
    in_file += bytes;
    total += bytes;
    largest = std::max(largest, bytes);
  }
  env->CreateDirs(args.out);
  RemoveUnlessKept written(env);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, files.size());
    std::vector<SafetensorsEntry> entries;
    for (size_t i : files[f]) entries.push_back({plan[i].name, dtype_of(plan[i]), plan[i].shape});
    SafetensorsWriter writer(env, written.Add(JoinPath(args.out, name)), entries,
                             {{"format", "pt"}});
    for (size_t i : files[f]) {
      const HfTensor& t = plan[i];
      // The one tensor held at a time.
      const Tensor buffer = ReadPieces(reader, whole, t, dtype_of(t));
      writer.Append(buffer.bytes());
      weight_map[t.name] = name;
    }
    writer.Finish();
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  WriteFileAtomic(env, written.Add(JoinPath(args.out, "model.safetensors.index.json")),
                  index.dump(2) + "\n");
  if (verbatim) {
    // The model's own config (verl keeps it in huggingface/), copied as it is.
    if (!args.config.empty()) {
      WriteFileAtomic(env, written.Add(JoinPath(args.out, "config.json")), config_text);
    }
    written.Keep();
    return {plan.size(), files.size(), total, largest};
  }
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", spec.hidden},
      {"intermediate_size", spec.ffn},
      {"num_attention_heads", spec.heads},
      {"num_key_value_heads", spec.query_groups},
      {"num_hidden_layers", spec.layers},
      {"vocab_size", spec.vocab},
      {"tie_word_embeddings", spec.tied},
      {"hidden_act", spec.glu ? "silu" : "gelu"},
      {"torch_dtype", plan.empty() ? "float32" : std::string(DTypeName(dtype_of(plan[0])))}};
  WriteFileAtomic(env, written.Add(JoinPath(args.out, "config.json")), config.dump(2) + "\n");
  written.Keep();
  return {plan.size(), files.size(), total, largest};
}

int ExportCommand(const ExportArgs& args) {
  if (args.to == "hf") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument, "export --to hf needs --spec (the model's fields)");
    }
    ExportSummary s = ExportToHf(args);
    std::cout << fmt::format(
        "exported {} tensors ({} bytes) from {} to {}: {} file(s), largest tensor {} bytes\n",
        s.tensors, s.total_bytes, args.checkpoint, args.out, s.files, s.largest_tensor_bytes);
    return 0;  // kExitOk
  }
  if (args.to == "fsdp-dtensor") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument,
           "export --to fsdp-dtensor needs --spec (the model's fields) and --topology dp=N[,tp=T]");
    }
    FsdpDtensorExportSummary s = ExportToFsdpDtensor(args);
    std::cout << fmt::format(
        "exported {} to {} (fsdp-dtensor, {} ranks): {} model tensors, {} optimizer tensors, {} "
        "chunks, {} bytes written; {} objects not exported\n",
        args.checkpoint, args.out, s.ranks, s.model_tensors, s.optimizer_tensors, s.chunks,
        s.bytes_written, s.objects_dropped);
    return 0;  // kExitOk
  }
  ConvertSummary s = ConvertCheckpoint(args.checkpoint, args.out, FormatByName(args.to));
  std::cout << fmt::format(
      "converted {} to {} ({} format): {} tensors, {} objects, {} bytes written, largest tensor {} "
      "bytes\n",
      args.checkpoint, args.out, args.to, s.tensors, s.objects, s.bytes_written,
      s.largest_tensor_bytes);
  return 0;  // kExitOk
}

}  // namespace distckpt
