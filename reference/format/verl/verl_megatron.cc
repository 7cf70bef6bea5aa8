#include "format/verl/verl_megatron.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/json_parse.h"
#include "format/dcp/megatron_files.h"
#include "format/format.h"

namespace distckpt {

bool IsVerlMegatronComponent(Env* env, const std::string& component) {
  const std::string dist = JoinPath(component, kVerlDistCkptDir);
  const std::string config = JoinPath(dist, kMegatronConfigFileName);
  if (!env->IsDirectory(dist) || !env->FileExists(config)) return false;
  if (MegatronShardedBackend(ReadFileToString(env, config)).has_value()) return true;
  // `reshard --format native` of a verl root writes its dist_ckpt in our own
  // format, whose metadata.json (also written last) is the native metadata.
  return NativeFormat().Detect(env, dist);
}

std::optional<std::string> VerlMegatronDistCkpt(Env* env, const std::string& path,
                                                std::string* component) {
  if (!env->IsDirectory(path)) return std::nullopt;
  std::string found;
  if (IsVerlMegatronComponent(env, path)) {
    found = path;
  } else if (IsVerlMegatronComponent(env, JoinPath(path, "actor"))) {
    found = JoinPath(path, "actor");
  } else {
    std::vector<std::string> names = env->ListDir(path);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string dir = JoinPath(path, name);
      if (env->IsDirectory(dir) && IsVerlMegatronComponent(env, dir)) {
        found = dir;
        break;
      }
    }
  }
  if (found.empty()) return std::nullopt;
  if (component) *component = found;
  return JoinPath(found, kVerlDistCkptDir);
}

std::optional<nlohmann::json> VerlMegatronArgs(Env* env, const std::string& dist_ckpt_dir) {
  std::filesystem::path dir(dist_ckpt_dir);
  if (!dir.has_filename()) dir = dir.parent_path();
  const std::string file = JoinPath(dir.parent_path().string(), kVerlTransformerConfig);
  if (dir.filename() != kVerlDistCkptDir || !env->FileExists(file)) return std::nullopt;
  const nlohmann::json tc = ParseJson(ReadFileToString(env, file), file);
  if (!tc.is_object()) Fail(ErrorKind::kCorruption, "{}: not a JSON object", file);
  nlohmann::json args = nlohmann::json::object();
  for (const char* name : {"num_attention_heads", "num_query_groups", "num_layers", "hidden_size",
                           "ffn_hidden_size", "kv_channels"}) {
    if (tc.contains(name) && tc[name].is_number_integer()) args[name] = tc[name];
  }
  if (args.contains("num_query_groups") && args.contains("num_attention_heads")) {
    args["group_query_attention"] = args["num_query_groups"] != args["num_attention_heads"];
  }
  if (tc.contains("gated_linear_unit") && tc["gated_linear_unit"].is_boolean()) {
    args["swiglu"] = tc["gated_linear_unit"];
  }
  // verl builds GPTModel with the HF config's vocab_size, unpadded (Megatron's
  // training args would pad it to make_vocab_size_divisible_by x TP).
  args["make_vocab_size_divisible_by"] = 1;
  const std::string hf =
      JoinPath(JoinPath(dir.parent_path().string(), "huggingface"), "config.json");
  if (env->FileExists(hf)) {
    const nlohmann::json c = ParseJson(ReadFileToString(env, hf), hf);
    if (c.is_object() && c.contains("vocab_size") && c["vocab_size"].is_number_integer())
      args["vocab_size"] = c["vocab_size"];
  }
  return args;
}

void AddVerlMegatronArgs(Env* env, const std::string& dir, CheckpointMetadata& md) {
  if (md.common.is_object() && md.common.contains("args")) return;
  if (std::optional<nlohmann::json> args = VerlMegatronArgs(env, dir)) {
    if (!md.common.is_object()) md.common = nlohmann::json::object();
    md.common["args"] = std::move(*args);
  }
}

}  // namespace distckpt
