#include "format/native/native_writer.h"

#include <algorithm>

#include "core/error.h"
#include "format/native/block_checksums.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {

std::string DataFileName(int rank, int index) { return RankFileName(rank, index, ".bin"); }

bool IsDataFileName(std::string_view name) { return IsRankFileName(name, ".bin"); }

namespace {

constexpr size_t kPieceBytes = 256 << 10;  // well inside a core's L2

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
// is in the cache (one pass over memory instead of two), then written after
// the payload; the chunk keeps their checksum.
void NativeWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.offset = Append({});
  chunk.checksum.reset();
  chunk.block_checksums.clear();
  chunk.block_size = ChooseBlockSize(bytes.size());
  const uint64_t seed = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
  sums_.clear();
  sums_.reserve(BlockCount(bytes.size(), chunk.block_size));
  // Pieces of whole blocks (the block size divides kPieceBytes or exceeds it).
  const size_t piece_bytes = std::max<size_t>(kPieceBytes, chunk.block_size);
  for (size_t done = 0; done < bytes.size(); done += piece_bytes) {
    std::span<const std::byte> piece =
        bytes.subspan(done, std::min(piece_bytes, bytes.size() - done));
    for (size_t b = 0; b < piece.size(); b += chunk.block_size) {
      sums_.push_back(
          BlockChecksum(piece.subspan(b, std::min<size_t>(chunk.block_size, piece.size() - b)),
                        seed, sums_.size()));
    }
    Append(piece);
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
