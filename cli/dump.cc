// distckpt dump: one global tensor of a checkpoint (any format), written as
// its row-major elements in the stored dtype, little-endian, no header; or
// one object (its unique key; "common_state/shard_0_1" the common state a
// DCP checkpoint keeps as an object) as stored: the record of a format that
// has them (DCP: the torch.save archive of its item), else its JSON text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"
#include "format/format.h"

namespace distckpt {

namespace {

void WriteFile(const std::string& out, std::string_view bytes) {
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) Fail(ErrorKind::kIo, "cannot write {}", out);
}

// The object `unique_key` as stored; nullopt if the checkpoint holds no such object.
std::optional<std::string> StoredObjectBytes(CheckpointReader& reader,
                                             const std::string& unique_key) {
  std::shared_ptr<const ObjectRecord> record;
  if (auto it = reader.metadata().objects.find(unique_key); it != reader.metadata().objects.end()) {
    record = reader.ReadObjectRecord(it->second);
    if (!record) return reader.ReadObject(it->second);
  } else if (ShardedObject{kCommonStateKey, {}, {1}, {0}}.UniqueKey() == unique_key) {
    record = reader.CommonRecord();
  }
  if (!record) return std::nullopt;
  return record->bytes;
}

int DumpCommand(const std::string& dir, const std::string& key, const std::string& out) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  if (!md.tensors.contains(key)) {
    if (std::optional<std::string> bytes = StoredObjectBytes(*reader, key)) {
      WriteFile(out, *bytes);
      std::cout << fmt::format("{}: object {}, {} bytes as stored written to {}\n", dir, key,
                               bytes->size(), out);
      return kExitOk;
    }
    std::vector<std::string> keys;
    for (const auto& [k, t] : md.tensors) keys.push_back(k);
    Fail(ErrorKind::kKeyMismatch,
         "{} holds no tensor '{}' (tensors: {}) and no object of that unique key", dir, key,
         fmt::join(keys, ", "));
  }
  // The whole tensor as one unsharded request: every stored chunk is read
  // and the chunks must cover the tensor exactly once.
  CheckTensorStored(*reader, md.tensors.at(key));  // before a buffer of its claimed size
  Dict request{{key, LoadTensorsMetadata(dir, env).at(key)}};
  Node loaded =
      ReadShardedState(*reader, Node(std::move(request)), VerifyPolicy::kWhenWhole, nullptr);
  const Tensor& tensor = loaded.at(key).as<Tensor>();
  WriteFile(out, std::string_view(reinterpret_cast<const char*>(tensor.data()), tensor.nbytes()));
  std::cout << fmt::format("{}: {} {} {}, {} bytes written to {}\n", dir, key,
                           DTypeName(tensor.dtype()), ShapeToString(tensor.shape()),
                           tensor.nbytes(), out);
  return kExitOk;
}

struct DumpArgs {
  std::string dir, key, out;
};

}  // namespace

Command AddDumpCommand(CLI::App& app) {
  auto args = std::make_shared<DumpArgs>();
  CLI::App* dump =
      app.add_subcommand("dump",
                         "write one global tensor (little-endian, stored dtype), or one object "
                         "as stored, to a file");
  dump->add_option("dir", args->dir, "checkpoint directory (native or DCP)")->required();
  dump->add_option("key", args->key, "tensor key, or an object's unique key")->required();
  dump->add_option("--out,-o", args->out, "output file")->required();
  return {dump, [args](CommandLine&) {
            ResolveRunRoot(args->dir);
            return DumpCommand(args->dir, args->key, args->out);
          }};
}

}  // namespace distckpt
