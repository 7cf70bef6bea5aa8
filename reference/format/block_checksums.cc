#include "format/block_checksums.h"

#include <bit>
#include <iterator>

#include "core/error.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

uint64_t HashText(const std::string& text) {
  return Checksum(std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

uint64_t ChooseBlockSize(uint64_t length) {
  const uint64_t want = (length + kTargetBlocks - 1) / kTargetBlocks;
  if (want <= kMinBlockBytes) return kMinBlockBytes;
  if (want >= kMaxBlockBytes) return kMaxBlockBytes;
  return std::bit_ceil(want);
}

uint64_t BlockCount(uint64_t length, uint64_t block_size) {
  return length / block_size + (length % block_size != 0 ? 1 : 0);
}

uint64_t ChunkBindingSeed(const std::string& key, DType dtype, const StoredChunk& chunk) {
  // "chunk", key, dtype, offset, shape and "flat <start> <stop>" (or
  // nothing), each field after a NUL (a key could hold any other character).
  std::string text;
  text.reserve(64 + key.size());
  text.append("chunk\0", 6);
  text += key;
  text += '\0';
  text += DTypeName(dtype);
  text += '\0';
  AppendShape(chunk.box.offset, text);
  text += '\0';
  AppendShape(chunk.box.shape, text);
  text += '\0';
  if (chunk.flat)
    fmt::format_to(std::back_inserter(text), "flat {} {}", chunk.flat->start, chunk.flat->stop);
  return HashText(text);
}

uint64_t ObjectBindingSeed(const std::string& unique_key) {
  std::string text = "object";
  text.push_back('\0');
  return HashText(text + unique_key);
}

uint64_t BlockSeed(uint64_t seed, uint64_t index) { return seed + index * 0x9E3779B97F4A7C15ull; }

uint64_t BlockChecksum(std::span<const std::byte> data, uint64_t seed, uint64_t index) {
  return Checksum(data, BlockSeed(seed, index));
}

// The sums are stored as the host's uint64_t array (little-endian, like
// every payload: FORMAT.md).
static_assert(std::endian::native == std::endian::little);

uint64_t SumsChecksum(std::span<const uint64_t> sums, uint64_t seed) {
  return BlockChecksum(std::as_bytes(sums), seed, sums.size());
}

uint64_t SumsBytes(const StoredChunk& chunk) {
  if (!chunk.sums_checksum) return 0;
  return 8 * (chunk.tiles != 0 ? chunk.tiles : BlockCount(chunk.length, chunk.block_size));
}

BlockLayout TileLayout(const StoredTensor& tensor, const StoredChunk& chunk) {
  return BlockLayout::Tiles(
      tensor.global_shape, chunk.box, chunk.flat,
      chunk.flat_rows ? BlockLayout::Flat::kRows : BlockLayout::Flat::kUniform,
      DTypeSize(tensor.dtype), chunk.length, chunk.block_size);
}

bool SameTileInputs(const StoredTensor& ta, const StoredChunk& a, const StoredTensor& tb,
                    const StoredChunk& b) {
  return a.length == b.length && a.block_size == b.block_size && a.flat_rows == b.flat_rows &&
         a.box == b.box && a.flat == b.flat && DTypeSize(ta.dtype) == DTypeSize(tb.dtype) &&
         ta.global_shape == tb.global_shape;
}

uint64_t TileCounter::Tiles(const StoredTensor& tensor, const StoredChunk& chunk) {
  if (valid_ && SameTileInputs(tensor_, chunk_, tensor, chunk)) return tiles_;
  tiles_ = TileLayout(tensor, chunk).tiles();
  tensor_.dtype = tensor.dtype;
  tensor_.global_shape = tensor.global_shape;
  chunk_.box = chunk.box;
  chunk_.flat = chunk.flat;
  chunk_.flat_rows = chunk.flat_rows;
  chunk_.length = chunk.length;
  chunk_.block_size = chunk.block_size;
  valid_ = true;
  return tiles_;
}

BlockLayout ChunkLayout(const StoredTensor& tensor, const StoredChunk& chunk) {
  if (chunk.tiles == 0) return BlockLayout::Uniform(chunk.length, chunk.block_size);
  BlockLayout layout = TileLayout(tensor, chunk);
  if (layout.tiles() != chunk.tiles) {
    Fail(ErrorKind::kCorruption,
         "tensor '{}' chunk at global offset {}: {} tiles recorded, its shape cuts {}", tensor.key,
         ShapeToString(chunk.box.offset), chunk.tiles, layout.tiles());
  }
  return layout;
}

std::string BlockChecksumsToHex(const std::vector<uint64_t>& checksums) {
  std::string hex;
  hex.reserve(16 * checksums.size());
  for (uint64_t c : checksums) AppendChecksumHex(c, hex);
  return hex;
}

std::vector<uint64_t> BlockChecksumsFromHex(const std::string& hex) {
  if (hex.size() % 16 != 0) {
    Fail(ErrorKind::kCorruption, "{} hex digits are not a whole number of 16-digit checksums",
         hex.size());
  }
  std::vector<uint64_t> checksums;
  checksums.reserve(hex.size() / 16);
  for (size_t i = 0; i < hex.size(); i += 16)
    checksums.push_back(ChecksumFromHex(hex.substr(i, 16)));
  return checksums;
}

}  // namespace distckpt
