// JSON text from a file, parsed with its nesting bounded.
//
// nlohmann::json copies, compares, dumps and converts values recursively: a
// file nested tens of thousands of levels deep overflows the stack in the
// first copy. Every JSON file distckpt reads goes through ParseJson (or
// CheckJsonDepth before a parse of its own), which refuses text nested deeper
// than kMaxJsonDepth before anything is built: the check is one iterative
// scan of the text.
//
// Errors: CheckpointError(kCorruption) naming `source` (the file) for text
// nested too deep, not valid JSON (syntax, ill-formed UTF-8, a number out of
// range).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_CORE_JSON_PARSE_H_
#define DISTCKPT_CORE_JSON_PARSE_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace distckpt {

// Deeper than any checkpoint's own structure (metadata.json nests a few
// levels plus the user's common state) and far below what the recursion of
// nlohmann's copy and dump uses of a thread's stack.
inline constexpr size_t kMaxJsonDepth = 512;

// The deepest nesting of arrays and objects in `text` (brackets inside
// strings not counted); stops counting past `limit`, returning limit + 1.
size_t JsonNestingDepth(std::string_view text, size_t limit = kMaxJsonDepth);

// Fails when `text` nests deeper than kMaxJsonDepth.
void CheckJsonDepth(std::string_view text, const std::string& source);

// Whether `text` is well-formed UTF-8 (what a JSON string must hold:
// nlohmann's dump throws type_error 316, naming nothing, on anything else).
// No overlong forms, surrogates or code points past U+10FFFF.
bool IsValidUtf8(std::string_view text);

// CheckJsonDepth, then nlohmann::json::parse; a parse error names `source`.
nlohmann::json ParseJson(std::string_view text, const std::string& source);

}  // namespace distckpt

#endif  // DISTCKPT_CORE_JSON_PARSE_H_
