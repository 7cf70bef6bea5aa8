// Little-endian integers in byte strings: the fixed-width fields of zip
// records, pickles, DCP item indexes, safetensors headers, local blobs and
// wire messages, written and read one way.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_CORE_LITTLE_ENDIAN_H_
#define DISTCKPT_CORE_LITTLE_ENDIAN_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace distckpt {

// Appends the `bytes` low bytes of `value`, least significant first; past
// its 8 bytes, zeros (a run of zero fields written as one wide value).
inline void AppendLittleEndian(std::string& out, uint64_t value, size_t bytes) {
  if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap64(value);
  char buf[8];
  std::memcpy(buf, &value, 8);
  out.append(buf, bytes < 8 ? bytes : 8);
  if (bytes > 8) out.append(bytes - 8, '\0');
}

// The `bytes` (at most 8) bytes at `p` as a little-endian unsigned integer.
inline uint64_t LoadLittleEndian(const void* p, size_t bytes) {
  uint64_t value = 0;
  std::memcpy(&value, p, bytes < 8 ? bytes : 8);
  if constexpr (std::endian::native == std::endian::big) value = __builtin_bswap64(value);
  return value;
}

}  // namespace distckpt

#endif  // DISTCKPT_CORE_LITTLE_ENDIAN_H_
