// RapidCheck generators of a scenario's "fp8" section (scenarios/README.md):
// FP8 tensors with a per-tensor scale, stored `dequantized` (Megatron's) or
// `raw` (codes + scale_inv), loaded into float requests or fp8 requests of
// the same or another format and scale, and the saturation count each load
// must report, computed element by element (ExpectedSaturation).
//
// Thread-safety: generators are values; use them from one thread.
#ifndef DISTCKPT_PROPERTY_FP8_GENERATORS_H_
#define DISTCKPT_PROPERTY_FP8_GENERATORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/spec/spec.h"
#include "property/generators.h"
#include "topology/topology.h"

namespace distckpt {

// Inside rc::gen::exec: 1-2 fp8 tensors (keys q0, q1) valid under
// `topologies` (tensor layouts as GenTensorSpec draws them, no stack), with
// expect_saturated set from ExpectedSaturation for `seed`. Without
// `limits.load_dtype`, requests keep the nominal dtype or ask for fp8.
std::vector<Fp8TensorSpec> GenFp8Section(const std::vector<Topology>& topologies, uint64_t seed,
                                         const GenLimits& limits);

// How many values of the global tensor saturate when the load quantises them
// into the request (0 when the request is a float dtype or the raw codes are
// kept bit-exact): each logical element's code (the scenario's value
// generator, or index mod 256 for all_codes) decoded, scaled by 1/scale,
// rounded to the nominal dtype if stored dequantized, scaled by the load
// scale in f32 and compared with the format's largest finite value.
int64_t ExpectedSaturation(uint64_t seed, const Fp8TensorSpec& spec);

// Sets every fp8 entry's expect_saturated (where set) from
// ExpectedSaturation: a shrunk scenario (another seed, smaller shapes)
// keeps a right expectation.
void RefreshFp8Expectations(Scenario& scenario);

// The fp8 classes of a scenario (fp8-scaled, fp8-raw, fp8-dequantized,
// fp8-to-float, fp8-requantised, fp8-bit-exact, fp8-saturating, ...).
std::vector<std::string> Fp8Classes(const Scenario& scenario);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_FP8_GENERATORS_H_
