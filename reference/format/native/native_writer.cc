#include "format/native/native_writer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "format/hashed_writes.h"
#include "format/native/block_checksums.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {

std::string DataFileName(int rank, int index) { return RankFileName(rank, index, ".bin"); }

bool IsDataFileName(std::string_view name) { return IsRankFileName(name, ".bin"); }

namespace {

// Pieces hashed and written by one thread: well inside a core's L2.
constexpr size_t kPieceBytes = 256 << 10;
CheckpointMetadata NativeHeader() {
  CheckpointMetadata md;
  md.format = "native";
  md.format_version = kNativeFormatVersion;
  return md;
}

}  // namespace

NativeWriter::NativeWriter(Env* env, std::string dir, int rank, int stream)
    : DataFileWriter(env, std::move(dir), rank, DataFileName(rank, stream), NativeHeader()) {}

// Version 3 chunks: one bound checksum per block (block_checksums.h),
// computed piece by piece right before the write copies the piece, while it
// is in the cache (one pass over memory instead of two), or for large chunks
// by helpers while the writes go on; then written after the payload; the
// chunk keeps their checksum.
void NativeWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.offset = Append({});
  chunk.checksum.reset();
  chunk.block_checksums.clear();
  chunk.block_size = ChooseBlockSize(bytes.size());
  const uint64_t seed = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
  sums_.resize(BlockCount(bytes.size(), chunk.block_size));
  const bool offload = helpers() > 0 && bytes.size() >= kHashOffloadMinBytes;
  // Pieces of whole blocks (the block size divides the piece size or exceeds it).
  const size_t piece_bytes =
      std::max<size_t>(offload ? kHashedPieceBytes : kPieceBytes, chunk.block_size);
  const size_t pieces = (bytes.size() + piece_bytes - 1) / piece_bytes;
  // Pieces [begin, end).
  auto pieces_bytes = [&](size_t begin, size_t end) {
    return bytes.subspan(begin * piece_bytes,
                         std::min(end * piece_bytes, bytes.size()) - begin * piece_bytes);
  };
  auto hash = [&](size_t i) {
    std::span<const std::byte> data = pieces_bytes(i, i + 1);
    const size_t first = i * piece_bytes / chunk.block_size;
    for (size_t b = 0; b * chunk.block_size < data.size(); ++b) {
      sums_[first + b] = BlockChecksum(
          data.subspan(b * chunk.block_size,
                       std::min<size_t>(chunk.block_size, data.size() - b * chunk.block_size)),
          seed, first + b);
    }
  };
  if (offload) {
    AppendWhileHelpersHash(pieces, kMaxHashedRunBytes / piece_bytes, helpers(), hash,
                           [&](size_t begin, size_t end) { Append(pieces_bytes(begin, end)); });
  } else {
    for (size_t i = 0; i < pieces; ++i) {
      hash(i);
      Append(pieces_bytes(i, i + 1));
    }
  }
  AppendChecksums(std::as_bytes(std::span(sums_)));
  chunk.sums_checksum = SumsChecksum(sums_, seed);
}

void NativeWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  object.length = bytes.size();
  // Objects are small and always read whole: one checksum, bound to the unique key.
  object.offset = Append(bytes);
  object.checksum = Checksum(bytes, ObjectBindingSeed(object.unique_key));
}

}  // namespace distckpt
