#include "format/native/native_writer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "format/block_checksums.h"
#include "format/hashed_writes.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {

std::string DataFileName(int rank, int index) { return RankFileName(rank, index, ".bin"); }

bool IsDataFileName(std::string_view name) { return IsRankFileName(name, ".bin"); }

namespace {

// Pieces hashed and written by one thread: well inside a core's L2.
constexpr size_t kPieceBytes = 256 << 10;
// The checksums of tiles [first, last) of `layout`, the payload `data`,
// into out[first...].
void HashTiles(const BlockLayout& layout, std::span<const std::byte> data, uint64_t seed,
               uint64_t first, uint64_t last, std::span<uint64_t> out) {
  std::vector<std::byte> scratch;
  auto at = [&](uint64_t offset) { return data.data() + offset; };
  for (uint64_t t = first; t < last; ++t)
    out[t] = TileChecksum(layout, t, BlockSeed(seed, t), at, scratch);
}

CheckpointMetadata NativeHeader() {
  CheckpointMetadata md;
  md.format = "native";
  md.format_version = kNativeFormatVersion;
  return md;
}

}  // namespace

NativeWriter::NativeWriter(Env* env, std::string dir, int rank, int stream)
    : DataFileWriter(env, std::move(dir), rank, DataFileName(rank, stream), NativeHeader()) {}

// Version 4 chunks: one bound checksum per tile (block_checksums.h,
// block_layout.h), computed piece by piece (whole tiles) right before the
// write copies the piece, while it is in the cache (one pass over memory
// instead of two), or for large chunks by helpers while the writes go on;
// then written after the payload; the chunk keeps their checksum.
void NativeWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.offset = Append({});
  chunk.checksum.reset();
  chunk.block_checksums.clear();
  chunk.block_size = ChooseBlockSize(bytes.size());
  chunk.flat_rows = true;
  const BlockLayout layout = TileLayout(tensor, chunk);
  chunk.tiles = layout.tiles();
  const uint64_t seed = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
  sums_.resize(layout.tiles());
  const bool offload = helpers() > 0 && bytes.size() >= kHashOffloadMinBytes;
  const std::vector<BlockLayout::Piece> pieces =
      layout.Pieces(offload ? kHashedPieceBytes : kPieceBytes);
  // Pieces [begin, end).
  auto pieces_bytes = [&](size_t begin, size_t end) {
    return bytes.subspan(pieces[begin].begin, pieces[end - 1].end - pieces[begin].begin);
  };
  auto hash = [&](size_t i) {
    HashTiles(layout, bytes, seed, pieces[i].first, pieces[i].last, sums_);
  };
  if (offload) {
    AppendWhileHelpersHash(
        pieces.size(), std::max<size_t>(1, kMaxHashedRunBytes / kHashedPieceBytes), helpers(), hash,
        [&](size_t begin, size_t end) { Append(pieces_bytes(begin, end)); });
  } else {
    for (size_t i = 0; i < pieces.size(); ++i) {
      hash(i);
      Append(pieces_bytes(i, i + 1));
    }
  }
  AppendChecksums(std::as_bytes(std::span(sums_)));
  chunk.sums_checksum = SumsChecksum(sums_, seed);
}

void NativeWriter::StoreChunks(std::span<PendingChunk> chunks) {
  StoreInRuns(chunks, [&](std::span<PendingChunk> run) { StoreSmallChunks(run); });
}

// The same bytes as StoreChunk of each in turn: payload, then its sums.
void NativeWriter::StoreSmallChunks(std::span<PendingChunk> chunks) {
  struct Sums {
    uint64_t seed;
    size_t first;  // in sums_
    size_t count;
  };
  std::vector<Sums> sums(chunks.size());
  // The distinct layouts, and each chunk's: a chunk with the previous one's
  // layout inputs (SameTileInputs) shares its layout.
  std::vector<BlockLayout> layouts;
  std::vector<size_t> layout_of(chunks.size());
  size_t total = 0, payload = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    StoredChunk& chunk = chunks[i].chunk;
    chunk.checksum.reset();
    chunk.block_checksums.clear();
    chunk.block_size = ChooseBlockSize(chunks[i].bytes.size());
    chunk.flat_rows = true;
    if (i == 0 ||
        !SameTileInputs(*chunks[i - 1].tensor, chunks[i - 1].chunk, *chunks[i].tensor, chunk)) {
      layouts.push_back(TileLayout(*chunks[i].tensor, chunk));
    }
    layout_of[i] = layouts.size() - 1;
    chunk.tiles = layouts.back().tiles();
    sums[i] = {ChunkBindingSeed(chunks[i].tensor->key, chunks[i].tensor->dtype, chunk), total,
               chunk.tiles};
    total += sums[i].count;
    payload += chunks[i].bytes.size();
  }
  sums_.resize(total);
  auto chunk_sums = [&](size_t i) {
    return std::span(sums_).subspan(sums[i].first, sums[i].count);
  };
  auto hash = [&](size_t i) {  // on this thread or a helper
    HashTiles(layouts[layout_of[i]], chunks[i].bytes, sums[i].seed, 0, sums[i].count,
              chunk_sums(i));
    chunks[i].chunk.sums_checksum = SumsChecksum(chunk_sums(i), sums[i].seed);
  };
  // Runs of about kMaxHashedRunBytes, each written as soon as it is hashed,
  // in one gathered write (AppendHeld).
  const size_t run =
      std::clamp<size_t>(kMaxHashedRunBytes * chunks.size() / std::max<size_t>(payload, 1), 1, 512);
  AppendWhileHelpersHash(chunks.size(), run, helpers(), hash, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      chunks[i].chunk.offset = AppendHeld(chunks[i].bytes);
      AppendChecksums(std::as_bytes(chunk_sums(i)), /*held=*/true);
    }
    FlushHeld();
  });
}

void NativeWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  object.length = bytes.size();
  // Objects are small and always read whole: one checksum, bound to the unique key.
  object.offset = Append(bytes);
  object.checksum = Checksum(bytes, ObjectBindingSeed(object.unique_key));
}

}  // namespace distckpt
