// libFuzzer target: torch.save zip archives (format/dcp/torch_zip.h,
// torch_save.h): the directory, every record's bytes (CRC checked) and the
// JSON-like value of data.pkl. Any input reads or throws CheckpointError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::ZipReader zip(bytes, "fuzz.pt");
    try {
      distckpt::TorchLoadJson(zip);
    } catch (const distckpt::CheckpointError&) {
    }
    try {
      distckpt::ReadTensorRecord(zip);
    } catch (const distckpt::CheckpointError&) {
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
