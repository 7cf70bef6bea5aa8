// Python-style text for messages that reproduce Megatron's wording: string
// reprs ('a'), tuples, lists and sets of strings, and numpy's str() of an
// integer array (used for the main-replica count grid).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MAPPING_PY_FORMAT_H_
#define DISTCKPT_MAPPING_PY_FORMAT_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/box.h"

namespace distckpt {

// repr() of a str: 'abc', or "it's" when the text holds a single quote only.
std::string PyRepr(std::string_view s);
// A tuple of already formatted elements: "()", "(a,)", "(a, b)".
std::string PyTuple(const std::vector<std::string>& elements);
// A list of already formatted elements: "[a, b]".
std::string PyList(const std::vector<std::string>& elements);
// A set of strings in sorted order: "{'a', 'b'}", or "set()" when empty.
std::string PyStrSet(const std::set<std::string>& items);

// numpy's str() of an integer array of `shape` whose element at row-major
// index i is at(i): "[[1 0]\n [1 2]]", right-aligned to a common width,
// wrapped at 75 columns, summarised with "..." past 1000 elements (numpy's
// default print options).
std::string NumpyIntArrayStr(const Shape& shape, const std::function<int64_t(int64_t)>& at);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_PY_FORMAT_H_
