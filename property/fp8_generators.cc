#include "property/fp8_generators.h"

#include <cmath>
#include <cstring>

#include "harness/expand/values.h"

namespace distckpt {
namespace {

// Scales: identity, powers of two, and others (448 / amax style, 0.37).
float PickScale() { return OneOf<float>({1.0f, 2.0f, 0.5f, 0.37f, 3.0f, 448.0f / 300.0f, 16.0f}); }

// `v` rounded to `dtype` as a float store does (round to nearest even).
double RoundTo(DType dtype, double v) {
  std::byte slot[8];
  StoreFromDouble(slot, dtype, 0, v);
  return LoadAsDouble(slot, dtype, 0);
}

}  // namespace

int64_t ExpectedSaturation(uint64_t seed, const Fp8TensorSpec& spec) {
  const Fp8Options& o = spec.fp8;
  const DType target = spec.tensor.load_dtype.value_or(spec.tensor.dtype);
  const float load_scale = o.load_scale.value_or(o.scale);
  if (!IsFp8(target)) return 0;  // dequantised into a float request
  if (o.storage == Fp8Storage::kRaw && target == o.format && load_scale == o.scale)
    return 0;  // codes kept
  const float max_finite = target == DType::kF8E4M3FN ? 448.0f : 57344.0f;
  const uint64_t key_hash = KeyHash(spec.tensor.key);
  const float scale_inv = 1.0f / o.scale;
  int64_t saturated = 0;
  for (int64_t i = 0; i < Volume(spec.tensor.shape); ++i) {
    uint8_t code = static_cast<uint8_t>(i % 256);
    if (!o.all_codes) {
      std::byte b[1];
      GenerateElement(seed, key_hash, i, o.format, b);
      std::memcpy(&code, b, 1);
    }
    const float decoded = o.format == DType::kF8E4M3FN ? E4M3FNToFloat(code) : E5M2ToFloat(code);
    float value = decoded * scale_inv;  // f32, as stored raw and dequantised on load
    if (o.storage == Fp8Storage::kDequantized)
      value = static_cast<float>(RoundTo(spec.tensor.dtype, value));
    const float scaled = value * load_scale;
    if (!std::isnan(scaled) && std::fabs(scaled) > max_finite) ++saturated;
  }
  return saturated;
}

std::vector<Fp8TensorSpec> GenFp8Section(const std::vector<Topology>& topologies, uint64_t seed,
                                         const GenLimits& limits) {
  GenLimits inner = limits;
  inner.stack = false;  // the fp8 section refuses prepended axes
  inner.load_dtype = false;
  std::vector<Fp8TensorSpec> out;
  const int n = OneIn(3) ? 2 : 1;
  for (int k = 0; k < n; ++k) {
    Fp8TensorSpec e;
    e.tensor = *GenTensorSpec("q" + std::to_string(k), topologies, inner);
    e.tensor.dtype = OneOf<DType>({DType::kBF16, DType::kF32, DType::kF16});
    e.fp8.format = OneOf<DType>({DType::kF8E4M3FN, DType::kF8E5M2});
    e.fp8.scale = PickScale();
    e.fp8.storage = OneIn(2) ? Fp8Storage::kRaw : Fp8Storage::kDequantized;
    e.fp8.all_codes = OneIn(4);
    const DType other_fp8 = e.fp8.format == DType::kF8E4M3FN ? DType::kF8E5M2 : DType::kF8E4M3FN;
    switch (Choose(limits.load_dtype ? 4 : 3)) {
      case 0:
        break;  // the nominal dtype
      case 1:
        e.tensor.load_dtype = e.fp8.format;
        break;  // fp8, same format
      case 2:
        e.tensor.load_dtype = other_fp8;
        break;
      default:  // another float dtype
        e.tensor.load_dtype = OneOf<DType>({DType::kF32, DType::kBF16, DType::kF16, DType::kF64});
        if (e.tensor.load_dtype == e.tensor.dtype) e.tensor.load_dtype.reset();
    }
    // Raw storage loaded as its own format at its own scale is the bit-exact
    // class, the rarest: same-format loads favour raw storage and keep the scale.
    const bool same_format = e.tensor.load_dtype == e.fp8.format;
    if (same_format && e.fp8.storage == Fp8Storage::kDequantized && OneIn(2))
      e.fp8.storage = Fp8Storage::kRaw;
    if (e.tensor.load_dtype && IsFp8(*e.tensor.load_dtype) && OneIn(same_format ? 6 : 3))
      e.fp8.load_scale = PickScale();
    e.fp8.expect_saturated = ExpectedSaturation(seed, e);
    out.push_back(std::move(e));
  }
  return out;
}

void RefreshFp8Expectations(Scenario& s) {
  for (Fp8TensorSpec& e : s.fp8) {
    if (e.fp8.expect_saturated) e.fp8.expect_saturated = ExpectedSaturation(s.seed, e);
  }
}

std::vector<std::string> Fp8Classes(const Scenario& s) {
  std::vector<std::string> tags;
  if (s.fp8.empty()) return tags;
  tags.emplace_back("fp8-scaled");
  for (const Fp8TensorSpec& e : s.fp8) {
    const DType target = e.tensor.load_dtype.value_or(e.tensor.dtype);
    const float load_scale = e.fp8.load_scale.value_or(e.fp8.scale);
    tags.emplace_back(e.fp8.storage == Fp8Storage::kRaw ? "fp8-raw" : "fp8-dequantized");
    if (!IsFp8(target))
      tags.emplace_back("fp8-to-float");
    else if (e.fp8.storage == Fp8Storage::kRaw && target == e.fp8.format &&
             load_scale == e.fp8.scale)
      tags.emplace_back("fp8-bit-exact");
    else
      tags.emplace_back("fp8-requantised");
    if (e.fp8.expect_saturated.value_or(0) > 0) tags.emplace_back("fp8-saturating");
    if (e.fp8.scale != 1.0f) tags.emplace_back("fp8-scale-not-1");
    if (e.fp8.all_codes) tags.emplace_back("fp8-all-codes");
  }
  return tags;
}

}  // namespace distckpt
