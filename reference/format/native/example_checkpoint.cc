#include "format/native/example_checkpoint.h"

#include <algorithm>

#include "format/native/metadata_json.h"

namespace distckpt {
namespace {

struct ExampleChunk {
  const char* key;
  DType dtype;
  Shape global_shape;
  Box box;
  std::optional<FlatRange> flat;
  int rank;
};

const std::vector<ExampleChunk>& ExampleChunks() {
  static const std::vector<ExampleChunk> chunks = {
      {"w", DType::kF32, {8, 5}, {{0, 0}, {4, 5}}, std::nullopt, 0},
      {"w", DType::kF32, {8, 5}, {{4, 0}, {4, 5}}, std::nullopt, 1},
      {"flat", DType::kF32, {4, 6}, {{0, 0}, {4, 6}}, FlatRange{0, 10}, 0},
      {"flat", DType::kF32, {4, 6}, {{0, 0}, {4, 6}}, FlatRange{10, 24}, 1},
      {"b", DType::kBF16, {3}, {{0}, {3}}, std::nullopt, 0},
  };
  return chunks;
}

DType ExampleDType(const std::string& key) { return key == "b" ? DType::kBF16 : DType::kF32; }

}  // namespace

std::vector<std::byte> ExampleChunkBytes(const std::string& key, const StoredChunk& chunk,
                                         int seed) {
  // The example's chunks are whole rows, so a chunk is one byte range of the
  // global tensor, whose byte j is a function of (key, seed, j).
  const size_t elem = DTypeSize(ExampleDType(key));
  const int64_t first = (chunk.box.offset.empty() ? 0 : chunk.box.offset[0]) *
                            (chunk.box.volume() / std::max<int64_t>(chunk.box.shape[0], 1)) +
                        (chunk.flat ? chunk.flat->start : 0);
  std::vector<std::byte> bytes(static_cast<size_t>(chunk.numel()) * elem);
  size_t salt = static_cast<size_t>(seed) * 7919;
  for (char c : key)
    salt = salt * 131 + static_cast<unsigned char>(c);  // portable, unlike std::hash
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>((salt + (first * elem + i) * 31) & 0xff);
  }
  return bytes;
}

std::string ExampleObjectPayload(int rank, int seed) {
  return "{\"rng_state\": [" + std::to_string(rank) + ", " + std::to_string(seed) + "]}";
}

CheckpointMetadata SaveExampleCheckpoint(Env* env, const std::string& dir, int seed,
                                         bool overwrite) {
  const Format& format = NativeFormat();
  const std::string write_dir = format.PrepareDirectory(env, dir, overwrite);
  CheckpointMetadata merged;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<CheckpointWriter> writer = format.NewWriter(env, write_dir, rank);
    for (const ExampleChunk& c : ExampleChunks()) {
      if (c.rank != rank) continue;
      StoredChunk chunk;
      chunk.box = c.box;
      chunk.flat = c.flat;
      writer->WriteTensorChunk(c.key, c.dtype, c.global_shape, c.box, c.flat,
                               ExampleChunkBytes(c.key, chunk, seed));
    }
    const std::string payload = ExampleObjectPayload(rank, seed);
    writer->WriteObject("rng", "rng/shard_" + std::to_string(rank) + "_2", {2}, {rank},
                        std::as_bytes(std::span(payload.data(), payload.size())));
    merged.MergeFrom(writer->Finish());
  }
  merged.format_version = kNativeFormatVersion;
  merged.topology = "tp=2";
  merged.common = {{"iteration", 100 + seed}};
  merged.content = {{"distrib_optim_sharding_type", "fully_sharded_model_space"}};
  format.Commit(env, dir, write_dir, merged);
  return merged;
}

}  // namespace distckpt
