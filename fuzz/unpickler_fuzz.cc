// libFuzzer target: the safe unpickler (format/dcp/unpickler.h), the pickle
// machine behind DCP .metadata and torch.save data.pkl. Any input yields a
// value tree or throws CheckpointError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "format/dcp/unpickler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::Unpickle(bytes, "fuzz.pkl");
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
