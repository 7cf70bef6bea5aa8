#include "property/tensor_diff.h"

#include <cstring>

#include <fmt/format.h>

#include "engine/metadata_api.h"

namespace distckpt {

std::vector<std::string> DiffGlobalTensors(const std::string& a, const std::string& b,
                                         size_t max_lines) {
  const Dict left = LoadPlainTensors(a).as<Dict>();
  const Dict right = LoadPlainTensors(b).as<Dict>();
  std::vector<std::string> diffs;
  auto add = [&](std::string line) {
    if (diffs.size() < max_lines) diffs.push_back(std::move(line));
  };
  for (const auto& [key, node] : left) {
    if (!right.count(key)) add(fmt::format("key '{}' only in {}", key, a));
  }
  for (const auto& [key, node] : right) {
    auto it = left.find(key);
    if (it == left.end()) {
      add(fmt::format("key '{}' only in {}", key, b));
      continue;
    }
    const Tensor& x = it->second.as<Tensor>();
    const Tensor& y = node.as<Tensor>();
    if (x.dtype() != y.dtype() || x.shape() != y.shape()) {
      add(fmt::format("key '{}': {} {} vs {} {}", key, DTypeName(x.dtype()), ShapeToString(x.shape()),
                      DTypeName(y.dtype()), ShapeToString(y.shape())));
      continue;
    }
    const size_t size = DTypeSize(x.dtype());
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (std::memcmp(x.data() + i * size, y.data() + i * size, size) != 0) {
        add(fmt::format("key '{}': element {} differs: {} vs {}", key, i, x.At(i), y.At(i)));
        break;
      }
    }
  }
  return diffs;
}

}  // namespace distckpt
