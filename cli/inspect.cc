// distckpt inspect: what a committed checkpoint holds.
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "format/format.h"
#include "format/native/metadata_json.h"

namespace distckpt {

int InspectCommand(const std::string& dir, bool json) {
  Env* env = Env::Default();
  const Format& format = DetectFormat(env, dir);
  std::unique_ptr<CheckpointReader> reader = format.OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  if (json) {
    std::cout << MetadataToJson(md).dump(2) << "\n";
    return kExitOk;
  }
  uint64_t total = 0;
  for (const auto& [key, t] : md.tensors) {
    for (const StoredChunk& c : t.chunks) total += c.length;
  }
  std::cout << fmt::format("{}: {} format v{}, written by {}, topology {}\n", dir, md.format,
                           md.format_version, md.writer, md.topology.empty() ? "?" : md.topology);
  std::cout << fmt::format("{} tensors, {} objects, {} bytes of tensor data\n", md.tensors.size(),
                           md.objects.size(), total);
  for (const auto& [key, t] : md.tensors) {
    uint64_t bytes = 0;
    for (const StoredChunk& c : t.chunks) bytes += c.length;
    std::cout << fmt::format("  {:<40} {:<10} {:<18} {:>4} chunks {:>12} bytes\n", key,
                             DTypeName(t.dtype), ShapeToString(t.global_shape), t.chunks.size(),
                             bytes);
  }
  for (const auto& [unique_key, o] : md.objects) {
    std::cout << fmt::format("  {:<40} object     {:>12} bytes\n", unique_key, o.length);
  }
  if (md.common.is_object() && !md.common.empty()) {
    std::string keys;
    for (auto it = md.common.begin(); it != md.common.end(); ++it)
      keys += (keys.empty() ? "" : ", ") + it.key();
    std::cout << fmt::format("common state: {}\n", keys);
  }
  return kExitOk;
}

}  // namespace distckpt
