// libFuzzer target: DCP .metadata decoding (format/dcp/dcp_metadata.h):
// unpickling plus the checks on its structure. Any input decodes or throws
// CheckpointError; a decoded one re-encodes and decodes again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "format/dcp/dcp_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::DcpMetadata m = distckpt::DecodeDcpMetadata(bytes, ".metadata");
    distckpt::DecodeDcpMetadata(distckpt::EncodeDcpMetadata(m), "re-encoded");
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
