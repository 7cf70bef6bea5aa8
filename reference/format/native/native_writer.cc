#include "format/native/native_writer.h"

#include <cctype>

#include "core/error.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

bool ConsumeDigits(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  s.remove_prefix(n);
  return n > 0;
}

bool ConsumePrefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string DataFileName(int rank, int index) { return fmt::format("__{}_{}.bin", rank, index); }

bool IsDataFileName(std::string_view name) {
  return ConsumePrefix(name, "__") && ConsumeDigits(name) && ConsumePrefix(name, "_") &&
         ConsumeDigits(name) && name == ".bin";
}

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
