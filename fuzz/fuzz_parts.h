// Inputs of several files in one fuzzer input: the parts are separated by
// kFuzzPartSeparator (ci/fuzz writes the seeds so). A missing part is empty.
// Header-only, for the fuzz targets.
#ifndef DISTCKPT_FUZZ_FUZZ_PARTS_H_
#define DISTCKPT_FUZZ_FUZZ_PARTS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace distckpt {

inline constexpr std::string_view kFuzzPartSeparator = "\n#distckpt-part#\n";

// The first `n` parts of `data` (the last one runs to the end).
inline std::vector<std::string_view> FuzzParts(const uint8_t* data, size_t size, size_t n) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    const size_t at = rest.find(kFuzzPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kFuzzPartSeparator.size());
  }
  parts.push_back(rest);
  parts.resize(n);
  return parts;
}

}  // namespace distckpt

#endif  // DISTCKPT_FUZZ_FUZZ_PARTS_H_
