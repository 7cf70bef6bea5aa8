#include "interop/verl_megatron_carry.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/json_parse.h"
#include "format/verl/verl_megatron.h"

namespace distckpt {
namespace {

// `from` (a file or a folder, recursively) to `to`, through `env`.
void CopyTree(Env* env, const std::string& from, const std::string& to) {
  if (!env->IsDirectory(from)) {
    env->CreateDirs(DirName(to));
    WriteFileAtomic(env, to, ReadFileToString(env, from));
    return;
  }
  env->CreateDirs(to);
  for (const std::string& name : env->ListDir(from)) {
    CopyTree(env, JoinPath(from, name), JoinPath(to, name));
  }
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::vector<std::string> CarryVerlMegatronFiles(Env* env, const VerlMegatronPaths& v, int tp,
                                                int pp) {
  std::vector<std::string> notes;
  const std::string lock = JoinPath(v.out_component, std::string(kVerlDistCkptDir) + ".lock");
  if (env->FileExists(lock)) env->RemoveFile(lock);
  for (const std::string& name : env->ListDir(v.component)) {
    if (name == kVerlDistCkptDir) continue;
    CopyTree(env, JoinPath(v.component, name), JoinPath(v.out_component, name));
  }
  const std::string tc = JoinPath(v.out_component, kVerlTransformerConfig);
  if (env->FileExists(tc)) {
    nlohmann::json j = ParseJson(ReadFileToString(env, tc), tc);
    if (j.is_object()) {
      j["tensor_model_parallel_size"] = tp;
      j["pipeline_model_parallel_size"] = pp;
      WriteFileAtomic(env, tc, j.dump(2) + "\n");
    }
  }
  if (!v.step.empty()) {
    const std::string component = BaseName(v.component);
    for (const std::string& name : env->ListDir(v.step)) {
      if (name == component) continue;
      const std::string path = JoinPath(v.step, name);
      if (env->IsDirectory(path)) {
        notes.push_back(
            fmt::format("not carried: verl component {} (reshard carries {})", name, component));
        continue;
      }
      CopyTree(env, path, JoinPath(v.out_step, name));
    }
  }
  return notes;
}

}  // namespace distckpt
