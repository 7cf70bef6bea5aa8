// distckpt inspect: what a committed checkpoint holds.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "format/block_checksums.h"  // internal: inspect --check reports the blocks
#include "format/format.h"
#include "format/native/metadata_json.h"  // internal: inspect shows the native metadata as stored

namespace distckpt {
namespace {

// Every data file the metadata names exists and holds at least the bytes it
// places there (each opened as a load would, nothing read). Throws
// CheckpointError(kCorruption) naming the file and an item stored in it.
void CheckDataFiles(Env* env, const std::string& dir, const CheckpointMetadata& md) {
  struct Need {
    uint64_t end = 0;
    std::string item;  // the item reaching furthest
  };
  std::map<std::string, Need> files;
  auto need = [&](const std::string& file, uint64_t end, const std::string& item) {
    Need& n = files[file];
    if (end >= n.end) n = {end, item};
  };
  for (const auto& [key, t] : md.tensors) {
    for (const StoredChunk& c : t.chunks) {
      // Native version 3: the chunk's block checksums follow its payload.
      const uint64_t sums = SumsBytes(c);
      need(c.file, c.offset + c.length + sums,
           fmt::format("tensor '{}' chunk at {} written by rank {}{}", key,
                       ShapeToString(c.box.offset), c.writer_rank,
                       sums != 0 ? " (its block checksums after it)" : ""));
    }
  }
  for (const auto& [unique_key, o] : md.objects) {
    need(o.file, o.offset + o.length,
         fmt::format("object '{}' written by rank {}", unique_key, o.writer_rank));
  }
  for (const auto& [file, n] : files) {
    const std::string path = JoinPath(dir, file);
    if (!env->FileExists(path)) {
      Fail(ErrorKind::kCorruption, "data file {} is missing (the metadata places {} in it)", path,
           n.item);
    }
    // Opened as a load opens it (a symbolic link, a FIFO or a device is
    // refused the same way), though nothing is read.
    const uint64_t size = env->NewRandomAccessFile(path)->size();
    if (size < n.end) {
      Fail(ErrorKind::kCorruption,
           "data file {} is truncated: {} bytes, the metadata places {} bytes in it ({} ends at "
           "byte {})",
           path, size, n.end, n.item, n.end);
    }
  }
  std::cout << fmt::format("check: {} data files present with the sizes the metadata implies\n",
                           files.size());
}

int InspectCommand(const std::string& dir, bool json, bool check) {
  Env* env = Env::Default();
  const Format& format = DetectFormat(env, dir);
  std::unique_ptr<CheckpointReader> reader = format.OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  if (check) CheckDataFiles(env, dir, md);
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

struct InspectArgs {
  std::string dir;
  bool json = false;
  bool check = false;
};

}  // namespace

Command AddInspectCommand(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* inspect = app.add_subcommand("inspect", "list what a checkpoint holds");
  inspect->add_option("dir", args->dir, "checkpoint directory")->required();
  inspect->add_flag("--json", args->json, "print the metadata as JSON");
  inspect->add_flag("--check", args->check,
                    "also check every data file is present with the sizes the metadata implies");
  return {inspect, [args](CommandLine&) {
            ResolveRunRoot(args->dir);
            return InspectCommand(args->dir, args->json, args->check);
          }};
}

}  // namespace distckpt
