// distckpt dump: one global tensor of a checkpoint (any format), written as
// its row-major elements in the stored dtype, little-endian, no header.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"
#include "format/format.h"

namespace distckpt {

int DumpCommand(const std::string& dir, const std::string& key, const std::string& out) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  if (!md.tensors.contains(key)) {
    std::vector<std::string> keys;
    for (const auto& [k, t] : md.tensors) keys.push_back(k);
    Fail(ErrorKind::kKeyMismatch, "{} holds no tensor '{}' (tensors: {})", dir, key,
         fmt::join(keys, ", "));
  }
  // The whole tensor as one unsharded request: every stored chunk is read
  // and the chunks must cover the tensor exactly once.
  Dict request{{key, LoadTensorsMetadata(dir, env).at(key)}};
  Node loaded =
      ReadShardedState(*reader, Node(std::move(request)), VerifyPolicy::kWhenWhole, nullptr);
  const Tensor& tensor = loaded.at(key).as<Tensor>();
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(tensor.data()),
             static_cast<std::streamsize>(tensor.nbytes()));
  file.close();
  if (!file) Fail(ErrorKind::kIo, "cannot write {}", out);
  std::cout << fmt::format("{}: {} {} {}, {} bytes written to {}\n", dir, key,
                           DTypeName(tensor.dtype()), ShapeToString(tensor.shape()),
                           tensor.nbytes(), out);
  return kExitOk;
}

}  // namespace distckpt
