#include "format/dcp/megatron_files.h"

#include <nlohmann/json.hpp>

#include "core/json_parse.h"

namespace distckpt {

std::string TorchDistConfigText() {
  nlohmann::ordered_json config = {{"sharded_backend", "torch_dist"},
                                   {"sharded_backend_version", 1},
                                   {"common_backend", "torch"},
                                   {"common_backend_version", 1}};
  return config.dump();
}

std::optional<std::string> MegatronShardedBackend(std::string_view text) {
  if (JsonNestingDepth(text) > kMaxJsonDepth) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto backend = j.find("sharded_backend");
  if (backend == j.end() || !backend->is_string()) return std::nullopt;
  return backend->get<std::string>();
}

}  // namespace distckpt
