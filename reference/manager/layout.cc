#include "manager/layout.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

namespace distckpt {

std::string_view CheckpointLayoutName(CheckpointLayout layout) {
  return layout == CheckpointLayout::kMegatron ? "megatron" : "verl";
}

CheckpointLayout ParseCheckpointLayout(std::string_view name) {
  if (name == "megatron") return CheckpointLayout::kMegatron;
  if (name == "verl") return CheckpointLayout::kVerl;
  Fail(ErrorKind::kInvalidArgument, "unknown checkpoint layout '{}' (megatron or verl)", name);
}

std::string IterationDirName(CheckpointLayout layout, int64_t iteration) {
  if (iteration < 0) Fail(ErrorKind::kInvalidArgument, "negative iteration {}", iteration);
  return layout == CheckpointLayout::kMegatron ? fmt::format("iter_{:07d}", iteration)
                                               : fmt::format("global_step_{}", iteration);
}

std::optional<int64_t> ParseIterationDirName(CheckpointLayout layout, std::string_view name) {
  std::string_view prefix = layout == CheckpointLayout::kMegatron ? "iter_" : "global_step_";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  if (layout == CheckpointLayout::kMegatron && digits.size() < 7) return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (value < 0) return std::nullopt;  // "iter_-1000006" names no iteration
  // One spelling per iteration: no "+", no extra leading zeros.
  if (IterationDirName(layout, value) != name) return std::nullopt;
  return value;
}

}  // namespace distckpt
