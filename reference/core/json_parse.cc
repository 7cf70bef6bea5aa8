#include "core/json_parse.h"

#include "core/error.h"
#include "core/json_integer.h"

namespace distckpt {

size_t JsonNestingDepth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) return limit + 1;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced: the parser reports it
        break;
      default:
        break;
    }
  }
  return deepest;
}

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;  // the bounds of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) <= n || p[1] < lo || p[1] > hi) return false;
    for (size_t i = 2; i <= n; ++i) {
      if (p[i] < 0x80 || p[i] > 0xbf) return false;
    }
    p += n + 1;
  }
  return true;
}

void CheckJsonDepth(std::string_view text, const std::string& source) {
  if (JsonNestingDepth(text) > kMaxJsonDepth) {
    Fail(ErrorKind::kCorruption,
         "{}: not valid JSON: arrays and objects nested deeper than {} levels", source,
         kMaxJsonDepth);
  }
}

nlohmann::json ParseJson(std::string_view text, const std::string& source) {
  CheckJsonDepth(text, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for 1e999
    Fail(ErrorKind::kCorruption, "{}: not valid JSON: {}", source, e.what());
  }
}

void ThrowNotAnInteger(std::string_view what, const std::string& value, bool is_signed,
                       size_t bytes) {
  Fail(ErrorKind::kCorruption, "{}: {} is not an integer of {}{} bits", what,
       value.size() > 64 ? value.substr(0, 64) + "..." : value, is_signed ? "signed " : "unsigned ",
       bytes * 8);
}

}  // namespace distckpt
