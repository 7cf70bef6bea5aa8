// distckpt export --to hf: a checkpoint (any topology, any format) to
// Hugging Face safetensors shards, streamed tensor by tensor
// (interop/hf/export.h).
#include "interop/hf/export.h"

#include <fmt/format.h>

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "format/format.h"
#include "format/safetensors/safetensors.h"
#include "interop/export_source.h"
#include "interop/hf/plan.h"

namespace distckpt {
namespace {

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

}  // namespace

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

}  // namespace distckpt
