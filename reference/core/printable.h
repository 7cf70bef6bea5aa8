// Bytes from a file shown in an error message: at most `limit` of them, each
// that is not printable ASCII written as \xHH, so a NUL or a control byte
// neither cuts the message short nor reaches the terminal.
//
// Thread-safety: pure function.
#ifndef DISTCKPT_CORE_PRINTABLE_H_
#define DISTCKPT_CORE_PRINTABLE_H_

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace distckpt {

inline std::string Printable(std::string_view bytes, size_t limit = 40) {
  std::string out;
  for (unsigned char c : bytes.substr(0, limit)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

}  // namespace distckpt

#endif  // DISTCKPT_CORE_PRINTABLE_H_
