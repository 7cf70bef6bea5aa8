// libFuzzer target: the native format's metadata.json (format/native/
// metadata_json.h) and the checks a reader runs on it before any read
// (CheckChunkTiling). Any input parses or throws CheckpointError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "format/checkpoint_metadata.h"
#include "format/native/metadata_json.h"

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
