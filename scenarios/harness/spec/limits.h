// Bounds on the numbers a scenario file may give, so that expanding it can
// neither overflow 64-bit arithmetic nor run for hours: with topology sizes
// below Topology::kMaxWorldSize (2^20), a size times a mesh size stays far
// below 2^63. Values past a bound are refused naming the JSON path.
//
// Thread-safety: constants.
#ifndef DISTCKPT_SCENARIO_LIMITS_H_
#define DISTCKPT_SCENARIO_LIMITS_H_

#include <cstdint>

namespace distckpt {

// Any extent, model dimension, padding multiple or bucket size: 2^40
// (a tensor's element count is bounded separately by Volume's overflow check).
inline constexpr int64_t kMaxScenarioSize = int64_t{1} << 40;

// Things expanded one by one on every rank: a model's layers and experts, the
// entries of a tensor stack.
inline constexpr int64_t kMaxScenarioCount = 4096;

// A model's layers times its experts (each expert layer is expanded on its
// own): 65536, above DeepSeek-V3's 61 x 256 and Kimi K2's 61 x 384.
inline constexpr int64_t kMaxScenarioLayerExperts = int64_t{1} << 16;

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_LIMITS_H_
