// libFuzzer target: topology strings (`--topology tp=2,pp=4,...`). Any input
// parses or throws CheckpointError; a parsed topology round-trips.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::Topology topo = distckpt::Topology::Parse(text);
    distckpt::Topology again = distckpt::Topology::Parse(topo.ToString());
    if (again.world_size() != topo.world_size()) __builtin_trap();
    if (topo.world_size() <= 16) {
      for (int r = 0; r < topo.world_size(); ++r) {
        if (topo.RankOf(topo.Coords(r)) != r) __builtin_trap();
      }
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
