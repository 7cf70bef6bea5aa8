// distckpt export --to hf: a checkpoint (any topology, any format) to
// Hugging Face safetensors shards, streamed tensor by tensor
// (interop/hf/export.h).
#include "interop/hf/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_integer.h"
#include "core/json_parse.h"
#include "format/format.h"
#include "format/safetensors/safetensors.h"
#include "interop/export_source.h"
#include "interop/hf/accounting.h"
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
  nlohmann::ordered_json config;
  if (!verbatim) {
    spec = args.model.is_null() ? GptExportSpecFromFile(args.spec)
                                : GptExportSpecFromJson(args.model, "--spec gpt");
  }
  const uint64_t max_shard = ParseByteSize(args.max_shard_size);
  const ExportSource source = OpenExportSource(args.checkpoint, env);
  CheckpointReader& reader = *source.reader;
  const std::map<std::string, ShardedTensor>& whole = source.tensors;
  const std::vector<std::pair<std::string, Shape>>& stored = source.shapes;
  ExportSummary summary;
  summary.objects_skipped = reader.metadata().objects.size();
  std::vector<HfTensor> plan;
  if (verbatim) {
    plan = PlanVerbatimExport(stored);
  } else {
    // Megatron's args (the checkpoint's common state) decide what the keys cannot.
    const nlohmann::json& common = reader.metadata().common;
    if (common.is_object() && common.contains("args")) spec.args = common["args"];
    const nlohmann::json* a = &spec.args;
    if (a->is_object() && a->contains("state")) a = &(*a)["state"];
    if (spec.topk == 0 && a->is_object() && a->contains("moe_router_topk") &&
        (*a)["moe_router_topk"].is_number_integer()) {
      spec.topk = JsonInteger<int64_t>((*a)["moe_router_topk"],
                                       args.checkpoint + ": common args moe_router_topk");
    }
    if (spec.kv_channels == 0 && a->is_object() && a->contains("kv_channels") &&
        (*a)["kv_channels"].is_number_integer()) {
      spec.kv_channels =
          JsonInteger<int64_t>((*a)["kv_channels"], args.checkpoint + ": common args kv_channels");
    }
    HfExportPlan hf = PlanHfExport(spec, stored);
    summary.architecture = hf.architecture.class_name;
    config = hf.architecture.config;
    plan = std::move(hf.tensors);
  }
  {
    std::vector<StoredInfo> infos;
    for (const auto& [key, t] : whole) infos.push_back({key, t.global_shape, t.dtype});
    summary.account = AccountExport(&plan, infos, spec.prefix, args.drops);
    if (!verbatim && !summary.account.unplaced.empty()) {
      Fail(ErrorKind::kUnsupported,
           "export --to hf: {} stored model tensor(s) would not be in the output (pass --drop "
           "GLOB to leave one out on purpose):\n  {}",
           summary.account.unplaced.size(), fmt::join(summary.account.unplaced, "\n  "));
    }
  }
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
  summary.tensors = plan.size();
  summary.files = files.size();
  summary.total_bytes = total;
  summary.largest_tensor_bytes = largest;
  if (verbatim) {
    // The model's own config (verl keeps it in huggingface/), copied as it is.
    if (!args.config.empty()) {
      WriteFileAtomic(env, written.Add(JoinPath(args.out, "config.json")), config_text);
    }
    written.Keep();
    return summary;
  }
  if (!plan.empty()) {
    // torch's names (config.json's torch_dtype), from the dtype written.
    const std::string name(DTypeName(dtype_of(plan[0])));
    const std::map<std::string, std::string> torch_names = {
        {"bf16", "bfloat16"}, {"f32", "float32"}, {"f16", "float16"}, {"f64", "float64"}};
    auto it = torch_names.find(name);
    config["torch_dtype"] = it == torch_names.end() ? name : it->second;
  }
  WriteFileAtomic(env, written.Add(JoinPath(args.out, "config.json")), config.dump(2) + "\n");
  written.Keep();
  return summary;
}

}  // namespace distckpt
