// metadata.json's text, written without nlohmann's serializer.
//
// AppendJson: value.dump() (nlohmann's compact text: no spaces, object keys
// in their sorted order) appended to a string, byte for byte, written
// directly for what metadata.json is made of (objects, arrays, integers,
// booleans, null and strings of printable ASCII) and through dump() for the
// rest (floating point numbers, strings needing escapes or holding UTF-8).
// A dump() builds a serializer and a string per call; metadata.json's
// renderer dumps every record and key.
//
// AppendJsonLaidOut: the same value laid out as metadata.json is: a scalar,
// an empty container, a flat record (an object of scalars and arrays of
// scalars) or a container whose compact text fits a line of 100 characters
// (its indentation included) on one line as AppendJson writes it; any other
// container broken over lines, a member per line indented by two spaces
// per depth ("key": value for an object's).
//
// Errors: as dump() (a string that is not valid UTF-8 throws json::type_error).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_
#define DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_

#include <charconv>
#include <concepts>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace distckpt {

inline constexpr size_t kJsonLineWidth = 100;

void AppendJson(const nlohmann::json& value, std::string& out);
// nlohmann::json(s).dump(): `s` as a JSON string.
void AppendJsonString(std::string_view s, std::string& out);
// nlohmann::json(value).dump() of an integer.
template <std::integral Int>
void AppendJsonInteger(Int value, std::string& out) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  out.append(digits, result.ptr);
}

// Appends `value` laid out at `depth` (its first line is not indented: the
// caller has written the indentation or the key) and returns its compact
// text, or a prefix of it longer than kJsonLineWidth.
std::string AppendJsonLaidOut(const nlohmann::json& value, int depth, std::string& out);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_
