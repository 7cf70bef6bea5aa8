#include "format/native/json_text.h"

#include <charconv>
#include <string_view>

namespace distckpt {
namespace {

using nlohmann::json;

// Printable ASCII other than the two characters JSON escapes.
bool Plain(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
  }
  return true;
}

template <typename Int>
void AppendInteger(Int value, std::string& out) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  out.append(digits, result.ptr);
}

}  // namespace

void AppendJsonString(const std::string& s, std::string& out) {
  if (!Plain(s)) {
    out += json(s).dump();
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

void AppendJson(const json& value, std::string& out) {
  switch (value.type()) {
    case json::value_t::object: {
      out += '{';
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (it != value.begin()) out += ',';
        AppendJsonString(it.key(), out);
        out += ':';
        AppendJson(it.value(), out);
      }
      out += '}';
      return;
    }
    case json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ',';
        AppendJson(value[i], out);
      }
      out += ']';
      return;
    }
    case json::value_t::string:
      AppendJsonString(value.get_ref<const std::string&>(), out);
      return;
    case json::value_t::number_integer:
      AppendInteger(value.get<int64_t>(), out);
      return;
    case json::value_t::number_unsigned:
      AppendInteger(value.get<uint64_t>(), out);
      return;
    case json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case json::value_t::null:
      out += "null";
      return;
    default:  // floating point, binary, discarded
      out += value.dump();
  }
}

}  // namespace distckpt
