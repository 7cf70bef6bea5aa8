// libFuzzer target: safetensors files (format/safetensors/safetensors.h):
// the 8-byte header length, the JSON header (dtype names, shapes, offsets that
// must tile the data section, __metadata__) and the reads of every tensor.
// The input is the whole file. Any input opens and reads, or throws
// CheckpointError.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors/safetensors.h"
#include "io/env.h"

namespace {

// One file per fuzzing process, rewritten for every input.
const std::string& InputPath() {
  static const std::string path =
      (std::filesystem::temp_directory_path() /
       ("safetensors-fuzz-" + std::to_string(getpid()) + ".safetensors"))
          .string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = InputPath();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    distckpt::SafetensorsFile file = distckpt::OpenSafetensors(distckpt::Env::Default(), path);
    std::vector<std::byte> buffer;
    for (const distckpt::SafetensorsEntry& e : file.entries) {
      // Offsets tile the data section, which the file's size bounds: reading
      // each entry is bounded by the input's size.
      buffer.resize(e.nbytes());
      file.ReadTensor(e, buffer);
      if (file.Find(e.name) == nullptr) __builtin_trap();
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
