#include "format/native/native_writer.h"

#include <algorithm>

#include "core/error.h"
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

// Checksums and writes piece by piece, so that the write copies each piece
// while the checksum has just brought it into the cache: one pass over memory
// instead of two. Returns the offset of the first byte.
uint64_t NativeWriter::AppendChecksummed(std::span<const std::byte> bytes,
                                         std::optional<uint64_t>& checksum) {
  const uint64_t offset = Append({});
  Checksummer checksummer;
  for (size_t done = 0; done < bytes.size(); done += kPieceBytes) {
    std::span<const std::byte> piece =
        bytes.subspan(done, std::min(kPieceBytes, bytes.size() - done));
    checksummer.Update(piece);
    Append(piece);
  }
  checksum = checksummer.Digest();
  return offset;
}

void NativeWriter::StoreChunk(const StoredTensor& /*tensor*/, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.offset = AppendChecksummed(bytes, chunk.checksum);
}

void NativeWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  object.length = bytes.size();
  object.offset = AppendChecksummed(bytes, object.checksum);
}

}  // namespace distckpt
