// libFuzzer target: scenario / spec JSON (harness/spec/spec.h Scenario::FromJson)
// and the expansion of every topology it names for rank 0. Any input is
// accepted or throws CheckpointError (JSON syntax errors included).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "harness/expand/rank_state.h"
#include "harness/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  try {
    distckpt::Scenario s = distckpt::Scenario::FromJson(json, "fuzz.json");
    // Expansion is linear in the expert layers (the spec bounds them at
    // 65536) but costs ~50 us each under ASan: keep an input within -timeout.
    for (const distckpt::GptConfig& m : s.models) {
      if (m.layers * std::max<int64_t>(m.experts, 1) > 256) return 0;
    }
    for (const std::string& t : s.topologies) {
      distckpt::Topology topo = distckpt::Topology::Parse(t);
      if (topo.world_size() > 64) continue;
      distckpt::ExpandRank(s, topo, 0);
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
