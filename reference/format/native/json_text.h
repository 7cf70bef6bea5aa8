// AppendJson: value.dump() (nlohmann's compact text: no spaces, object keys
// in their sorted order) appended to a string, byte for byte, written
// directly for what metadata.json is made of (objects, arrays, integers,
// booleans, null and strings of printable ASCII) and through dump() for the
// rest (floating point numbers, strings needing escapes or holding UTF-8).
// A dump() builds a serializer and a string per call; metadata.json's
// renderer dumps every record and key.
//
// Errors: as dump() (a string that is not valid UTF-8 throws json::type_error).
//
// Thread-safety: a pure function.
#ifndef DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_
#define DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_

#include <nlohmann/json.hpp>
#include <string>

namespace distckpt {

void AppendJson(const nlohmann::json& value, std::string& out);
// nlohmann::json(s).dump(): `s` as a JSON string.
void AppendJsonString(const std::string& s, std::string& out);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_JSON_TEXT_H_
