#include "format/native/json_text.h"

#include <algorithm>

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

// An object of scalars and arrays of scalars (a chunk, an object entry).
bool IsFlatRecord(const json& value) {
  if (!value.is_object()) return false;
  for (const json& member : value) {
    if (member.is_object()) return false;
    if (member.is_array() && std::any_of(member.begin(), member.end(),
                                         [](const json& e) { return e.is_structured(); })) {
      return false;
    }
  }
  return true;
}

}  // namespace

void AppendJsonString(std::string_view s, std::string& out) {
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
      AppendJsonInteger(value.get<int64_t>(), out);
      return;
    case json::value_t::number_unsigned:
      AppendJsonInteger(value.get<uint64_t>(), out);
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

// Every value is dumped once, bottom up: a container decides its layout from
// its members' compact texts. A dump stops growing once it is longer than a
// line (only its length then matters: too long).
std::string AppendJsonLaidOut(const json& value, int depth, std::string& out) {
  if (!value.is_structured() || value.empty() || IsFlatRecord(value)) {
    std::string flat;
    AppendJson(value, flat);
    out += flat;
    return flat;
  }
  const bool object = value.is_object();
  std::string flat(1, object ? '{' : '[');
  std::string broken = object ? "{\n" : "[\n";
  std::string key;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it != value.begin()) {
      if (flat.size() <= kJsonLineWidth) flat += ',';
      broken += ",\n";
    }
    broken.append(2 * (depth + 1), ' ');
    if (object) {
      key.clear();
      AppendJsonString(it.key(), key);
      if (flat.size() <= kJsonLineWidth) (flat += key) += ':';
      broken += key;
      broken += ": ";
    }
    const std::string member = AppendJsonLaidOut(*it, depth + 1, broken);
    if (flat.size() <= kJsonLineWidth) flat += member;
  }
  flat += object ? '}' : ']';
  broken += '\n';
  broken.append(2 * depth, ' ');
  broken += object ? '}' : ']';
  out += 2 * static_cast<size_t>(depth) + flat.size() <= kJsonLineWidth ? flat : broken;
  return flat;
}

}  // namespace distckpt
