// Integers read from untrusted JSON: of the type and range the reader
// wants, or a CheckpointError naming what was read.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_CORE_JSON_INTEGER_H_
#define DISTCKPT_CORE_JSON_INTEGER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace distckpt {

[[noreturn]] void ThrowNotAnInteger(std::string_view what, const std::string& value, bool is_signed,
                                    size_t bytes);

// `j` as an integer of type T: CheckpointError(kCorruption) "<what>: <j> is
// not an integer of T's range" for anything else. (nlohmann's get<T>() of a
// float casts it: undefined for one out of T's range, e.g. a literal past
// 2^64, which nlohmann parses as a float.)
template <typename T>
T JsonInteger(const nlohmann::json& j, std::string_view what) {
  static_assert(std::is_integral_v<T>);
  bool fits = false;
  if (j.is_number_unsigned()) {
    fits = j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    fits = std::is_signed_v<T> ? v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                     v <= static_cast<int64_t>(std::numeric_limits<T>::max())
                               : v >= 0;
  }
  if (!fits) ThrowNotAnInteger(what, j.dump(), std::is_signed_v<T>, sizeof(T));
  return j.get<T>();
}

// An array of integers, each as JsonInteger.
template <typename T>
std::vector<T> JsonIntegers(const nlohmann::json& j, std::string_view what) {
  if (!j.is_array()) ThrowNotAnInteger(what, j.dump(), std::is_signed_v<T>, sizeof(T));
  std::vector<T> out;
  out.reserve(j.size());
  for (const nlohmann::json& v : j) out.push_back(JsonInteger<T>(v, what));
  return out;
}

}  // namespace distckpt

#endif  // DISTCKPT_CORE_JSON_INTEGER_H_
