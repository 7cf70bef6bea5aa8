// libFuzzer target: the native format's metadata.json (format/native/
// metadata_json.h) and the checks a reader runs on it before any read
// (CheckChunkTiling). Any input parses or throws CheckpointError.
//
// Mutations that change a byte of a version 2 or 3 file die at its
// metadata_checksum, before the field checks behind it. The custom mutator
// re-seals: after libFuzzer's mutation, an input that is still JSON with a
// "metadata_checksum" of 16 hex digits gets the checksum its contents hash
// to written over the old one in place (the text is otherwise kept as it is),
// as a tool rewriting the file would, so mutated fields reach the parser's
// field checks (issue 39: a resealed block_size 0 was a division by zero).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json_parse.h"
#include "format/checkpoint_metadata.h"
#include "format/native/json_text.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

// Writes the checksum of `text`'s contents over its metadata_checksum value
// (same length: 16 hex digits), when `text` is such a JSON object.
void Reseal(char* data, size_t size) {
  const std::string_view text(data, size);
  constexpr std::string_view kKey = "\"metadata_checksum\"";
  const size_t key = text.find(kKey);
  if (key == std::string_view::npos) return;
  const size_t open = text.find('"', key + kKey.size());
  if (open == std::string_view::npos || open + 17 >= size || text[open + 17] != '"') return;
  if (distckpt::JsonNestingDepth(text) > distckpt::kMaxJsonDepth) return;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("metadata_checksum")) return;
  j.erase("metadata_checksum");
  std::string compact;
  try {
    distckpt::AppendJson(j, compact);  // as MetadataChecksum hashes it
  } catch (const nlohmann::json::exception&) {
    return;  // a string that is not UTF-8: the parser refuses it anyway
  }
  const std::string hex = distckpt::ChecksumToHex(
      distckpt::Checksum(std::as_bytes(std::span(compact.data(), compact.size()))));
  if (hex.size() == 16) std::memcpy(data + open + 1, hex.data(), 16);
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int /*seed*/) {
  size = LLVMFuzzerMutate(data, size, max_size);
  Reseal(reinterpret_cast<char*>(data), size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::CheckpointMetadata m = distckpt::MetadataFromText(text, "metadata.json");
    distckpt::CheckChunkTiling(m, "metadata.json");
    distckpt::MetadataFromText(distckpt::MetadataToText(m), "round trip");
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
