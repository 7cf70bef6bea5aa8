#include "cli/index_hint.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <set>

#include "format/dcp/sidecar_index.h"  // internal: where the readers look for sidecars
#include "format/format.h"

namespace distckpt {

void AddIndexDirOption(CLI::App* cmd, std::string& dir) {
  cmd->add_option("--index-dir", dir,
                  "where `distckpt index` wrote item indexes of torch's files (default: "
                  "$DISTCKPT_INDEX_DIR, else its cache directory)");
}

void UseIndexDir(const std::string& dir) {
  if (!dir.empty()) setenv("DISTCKPT_INDEX_DIR", dir.c_str(), 1);
}

bool ReadsTorchRecordsWhole(Env* env, const std::string& dir, const CheckpointMetadata& md) {
  if (!md.format.starts_with("dcp") || md.writer.starts_with("distckpt")) return false;
  std::set<std::string> files;
  for (const auto& [key, tensor] : md.tensors) {
    for (const StoredChunk& chunk : tensor.chunks) files.insert(chunk.file);
  }
  const std::string cache = env->name() == "posix" ? DcpIndexCacheDir() : "";
  for (const std::string& file : files) {
    const std::string path = JoinPath(dir, file);
    if (!env->FileExists(path)) continue;  // the load reports it
    if (env->FileExists(DcpSidecarBeside(path))) continue;
    if (!cache.empty() && env->FileExists(DcpSidecarCached(cache, path, env->FileSize(path))))
      continue;
    return true;
  }
  return false;
}

std::string IndexHint(Env* env, const std::string& dir, uint64_t read, uint64_t needed,
                      const std::string& shown_dir, const std::string& would) {
  if (read * 20 <= needed * 21) return "";
  try {
    if (!ReadsTorchRecordsWhole(env, dir, DetectFormat(env, dir).OpenReader(env, dir)->metadata()))
      return "";
  } catch (const std::exception&) {
    return "";  // a hint only: the command's verdict stands (its own reads said what failed)
  }
  const std::string beyond =
      would.empty()
          ? fmt::format("{} bytes read beyond the {} needed", read - needed, needed)
          : fmt::format("{} at least {} bytes beyond the {} needed", would, read - needed, needed);
  return fmt::format(
      "hint: {}: torch's records carry one CRC32 each, so a record needed in part is read whole "
      "to verify it; `distckpt index {}` (once) writes item indexes with which partial reads "
      "verify only the tiles they touch\n",
      beyond, shown_dir);
}

}  // namespace distckpt
