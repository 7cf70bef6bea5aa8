// The options of one tensor of a scenario's "fp8" section (documented in
// scenarios/README.md, implemented by harness/expand/fp8_section.h): an FP8 tensor
// with a per-tensor scale, how it is stored, and what the load requests.
//
// Thread-safety: value types.
#ifndef DISTCKPT_SCENARIO_FP8_SPEC_H_
#define DISTCKPT_SCENARIO_FP8_SPEC_H_

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace distckpt {

enum class Fp8Storage {
  kDequantized,  // Megatron's: the nominal dtype, values = codes x scale_inv
  kRaw,          // the fp8 codes (bit-exact) + a scale_inv companion entry
};

struct Fp8Options {
  DType format = DType::kF8E4M3FN;  // kF8E4M3FN or kF8E5M2
  float scale = 1.0f;               // value = code / scale; scale_inv = 1 / scale
  Fp8Storage storage = Fp8Storage::kDequantized;
  bool all_codes = false;  // code = logical linear index mod 256 (else random finite codes)
  // The request: the tensor spec's load_dtype (default: its nominal dtype)
  // is a float dtype (dequantised) or an fp8 dtype, quantised with
  // `load_scale` (default `scale`).
  std::optional<float> load_scale;
  // Values of the global tensor that saturate when quantised into the
  // request (each element once, whatever the topology); nullopt = not checked.
  std::optional<int64_t> expect_saturated;
};

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_FP8_SPEC_H_
