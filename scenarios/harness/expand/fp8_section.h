// The "fp8" section of a scenario (scenarios/README.md): FP8 tensors with a
// per-tensor scale (reference/fp8/, docs/megatron-semantics.md §6), saved in one of
// two storage modes and loaded into float or FP8 requests.
//
// - `dequantized` (Megatron's): saved in the nominal dtype with values
//   codes x scale_inv; a float request loads them (converted if its dtype
//   differs), an FP8 request quantises the loaded values with its scale.
// - `raw`: the codes are saved as an fp8 tensor and scale_inv as the
//   companion entry ScaleInvKey(key) (f32, shape (1,), replicated); the load
//   requests both, then dequantises into a float request, or keeps the codes
//   bit-exact for an FP8 request of the same format and scale (otherwise
//   re-quantises with the request's scale).
// Quantising saturates (round to nearest even); the saturated values are
// counted on main-replica request shards only, so their sum over ranks counts
// each element of the global tensor once, whatever the topology.
//
// The state dict holds these tensors under "fp8" at the root, keyed by their
// keys (the section is parsed by harness/spec/fp8_parse.h).
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_FP8_SECTION_H_
#define DISTCKPT_SCENARIO_FP8_SECTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/spec/spec.h"
#include "mapping/state_dict.h"
#include "topology/topology.h"

namespace distckpt {

// Rank `rank`'s fp8 tensors as saved (a Dict, empty without an fp8 section).
Node BuildFp8SaveState(const Scenario& scenario, const Topology& topology, int rank);
// Rank `rank`'s fp8 requests (a Dict); keys in the pair's load_drop are left out.
Node BuildFp8Request(const Scenario& scenario, const PairSpec* pair, const Topology& topology,
                     int rank);

struct Fp8Check {
  std::optional<std::string> error;  // the first element that differs
  std::vector<int64_t> saturated;    // per scenario.fp8 entry, this rank's main-replica count
};
// Converts what rank `rank` loaded ("fp8" of `loaded`, the load's state
// dict) into each request's dtype, in place, and checks every element
// bit-exactly against the generated codes taken through the same storage
// and conversions.
Fp8Check CheckFp8Loaded(const Scenario& scenario, const PairSpec* pair, const Topology& topology,
                        int rank, Node& loaded);
// Checks the saturation counts summed over ranks against expect_saturated.
std::optional<std::string> CheckFp8Saturation(const Scenario& scenario,
                                              const std::vector<int64_t>& totals);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_FP8_SECTION_H_
