#include "format/native/native_writer.h"

#include "core/error.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {

std::string DataFileName(int rank, int index) { return RankFileName(rank, index, ".bin"); }

bool IsDataFileName(std::string_view name) { return IsRankFileName(name, ".bin"); }

namespace {

CheckpointMetadata NativeHeader() {
  CheckpointMetadata md;
  md.format = "native";
  md.format_version = kNativeFormatVersion;
  return md;
}

}  // namespace

NativeWriter::NativeWriter(Env* env, std::string dir, int rank, int stream)
    : DataFileWriter(env, std::move(dir), rank, DataFileName(rank, stream), NativeHeader()) {}

void NativeWriter::StoreChunk(const StoredTensor& /*tensor*/, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.checksum = Checksum(bytes);
  chunk.offset = Append(bytes);
}

void NativeWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  object.checksum = Checksum(bytes);
  object.length = bytes.size();
  object.offset = Append(bytes);
}

}  // namespace distckpt
