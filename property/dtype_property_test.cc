// Property 7: the float codecs (f16, bf16, fp8_e4m3fn, fp8_e5m2) against an
// independent oracle built from the formats' definitions (sign, exponent
// bits, mantissa bits, bias; e4m3fn has no infinity and one NaN mantissa):
//  - decoding every code gives the value the definition gives;
//  - encoding rounds to nearest, ties to even, overflowing as PyTorch does
//    (to infinity; to NaN for e4m3fn), Saturate* clamp to the largest finite;
//  - encoding is monotonic;
//  - quantise∘dequantise is the identity on representable values, directly
//    and through every wider dtype (ConvertElements).
// Cases are bit patterns, not scenarios: RapidCheck prints the counterexample.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/dtype.h"
#include "property/generators.h"
#include "property/harness.h"

namespace distckpt {
namespace {

struct FloatFormat {
  DType dtype;
  int exp_bits, mant_bits;
  bool has_inf;  // else (e4m3fn) exponent all ones is finite except mantissa all ones (NaN)
  std::vector<DType> wider;  // dtypes holding every value of this one
  std::function<uint32_t(float)> encode;
  std::function<uint32_t(float)> saturate;  // empty: no saturating variant
  std::function<float(uint32_t)> decode;

  int bits() const { return 1 + exp_bits + mant_bits; }
  uint32_t sign_bit() const { return 1u << (exp_bits + mant_bits); }
  // The positive code after the largest finite one: infinity, or e4m3fn's NaN.
  uint32_t overflow_code() const {
    return has_inf ? ((1u << exp_bits) - 1) << mant_bits : (1u << (exp_bits + mant_bits)) - 1;
  }
  // |value| of a positive code by the normal/subnormal formula (for the
  // overflow code: the value it would have with an unbounded exponent).
  double Magnitude(uint32_t code) const {
    const int bias = (1 << (exp_bits - 1)) - 1;
    const int exp = static_cast<int>(code >> mant_bits);
    const double mant = code & ((1u << mant_bits) - 1);
    return exp == 0 ? std::ldexp(mant, 1 - bias - mant_bits)
                    : std::ldexp(mant + (1u << mant_bits), exp - bias - mant_bits);
  }
};

const std::vector<FloatFormat>& Formats() {
  static const std::vector<FloatFormat> formats = {
      {DType::kF16, 5, 10, true, {DType::kF32, DType::kF64}, FloatToHalf, nullptr, HalfToFloat},
      {DType::kBF16,
       8,
       7,
       true,
       {DType::kF32, DType::kF64},
       FloatToBFloat16,
       nullptr,
       BFloat16ToFloat},
      {DType::kF8E4M3FN,
       4,
       3,
       false,
       {DType::kF16, DType::kBF16, DType::kF32, DType::kF64},
       FloatToE4M3FN,
       SaturateToE4M3FN,
       [](uint32_t c) { return E4M3FNToFloat(static_cast<uint8_t>(c)); }},
      {DType::kF8E5M2,
       5,
       2,
       true,
       {DType::kF16, DType::kBF16, DType::kF32, DType::kF64},
       FloatToE5M2,
       SaturateToE5M2,
       [](uint32_t c) { return E5M2ToFloat(static_cast<uint8_t>(c)); }},
  };
  return formats;
}

// The oracle's value of a code (NaN for NaN codes).
double OracleDecode(const FloatFormat& f, uint32_t code) {
  const double sign = code & f.sign_bit() ? -1 : 1;
  const uint32_t magnitude = code & (f.sign_bit() - 1);
  if (magnitude == f.overflow_code()) return f.has_inf ? sign * INFINITY : NAN;
  if (magnitude > f.overflow_code()) return NAN;
  return sign * f.Magnitude(magnitude);
}

// The oracle's code for x: nearest, ties to the even code; |x| at or past
// the midpoint to the overflow code takes the overflow code. nullopt = NaN.
std::optional<uint32_t> OracleEncode(const FloatFormat& f, double x, bool saturate) {
  if (std::isnan(x)) return std::nullopt;
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  const double a = std::fabs(x);
  const uint32_t top = f.overflow_code();
  uint32_t lo = 0, hi = top;  // largest code with Magnitude <= a
  if (a >= f.Magnitude(top)) {
    lo = top;
  } else {
    while (lo < hi) {
      const uint32_t mid = (lo + hi + 1) / 2;
      if (f.Magnitude(mid) <= a)
        lo = mid;
      else
        hi = mid - 1;
    }
    const double below = f.Magnitude(lo), above = f.Magnitude(lo + 1);
    if (a - below > above - a || (a - below == above - a && lo % 2 == 1)) ++lo;
  }
  if (lo == top) {
    if (saturate) return sign | (top - 1);
    if (!f.has_inf) return std::nullopt;
  }
  return sign | lo;
}

const FloatFormat& PickFormat() {
  const FloatFormat& f = Formats()[Choose(Formats().size())];
  RC_TAG(std::string(DTypeName(f.dtype)));
  return f;
}

uint32_t AnyCode(const FloatFormat& f) { return static_cast<uint32_t>(*Uniform(1u << f.bits())); }

bool SameResult(std::optional<uint32_t> want, uint32_t got, const FloatFormat& f) {
  return want ? got == *want : std::isnan(OracleDecode(f, got));
}

// A float worth encoding: an exact value, a tie, a tie nudged by one float
// ulp, a value of the format's range, or any bit pattern.
float InterestingFloat(const FloatFormat& f) {
  const uint32_t top = f.overflow_code();
  const double sign = OneIn(2) ? -1 : 1;
  const uint32_t c = static_cast<uint32_t>(*Uniform(top));
  const double tie = (f.Magnitude(c) + f.Magnitude(c + 1)) / 2;
  switch (Choose(6)) {
    case 0:
      RC_TAG("exact");
      return static_cast<float>(sign * f.Magnitude(c));
    case 1:
      RC_TAG("tie");
      return static_cast<float>(sign * tie);
    case 2: {
      RC_TAG("near-tie");
      const float t = static_cast<float>(tie);
      return static_cast<float>(sign) * std::nextafter(t, OneIn(2) ? INFINITY : 0.0f);
    }
    case 3: {
      RC_TAG("in-range");
      const int bias = (1 << (f.exp_bits - 1)) - 1;
      const int exponent =
          -bias - f.mant_bits - 26 + static_cast<int>(Choose(2 * bias + f.mant_bits + 6));
      return static_cast<float>(sign *
                                std::ldexp(static_cast<double>(*Uniform(1 << 24)), exponent));
    }
    case 4: {  // around the largest finite value and the overflow threshold
      RC_TAG("edge");
      const double max = f.Magnitude(top - 1), step = f.Magnitude(top) - max;
      return static_cast<float>(sign * (max + step * static_cast<double>(Choose(7)) / 4));
    }
    default: {
      RC_TAG("any-bits");
      const uint32_t bits = *rc::gen::arbitrary<uint32_t>();
      float x;
      std::memcpy(&x, &bits, sizeof x);
      return x;
    }
  }
}

TEST(DtypeProperty, DecodeFollowsTheFormatDefinition) {
  CheckProperty({2000}, [] {
    const FloatFormat& f = PickFormat();
    const uint32_t code = AnyCode(f);
    const double want = OracleDecode(f, code);
    const double got = f.decode(code);
    const bool same =
        std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
    RC_ASSERT(same);
  });
}

TEST(DtypeProperty, EncodeRoundsToNearestEven) {
  CheckProperty({3000, {{"tie", 0.1}, {"near-tie", 0.1}, {"overflow", 0.01}}}, [] {
    const FloatFormat& f = PickFormat();
    const float x = InterestingFloat(f);
    RC_CLASSIFY(std::fabs(x) >= f.Magnitude(f.overflow_code() - 1), "overflow");
    RC_ASSERT(SameResult(OracleEncode(f, x, false), f.encode(x), f));
    if (f.saturate) RC_ASSERT(SameResult(OracleEncode(f, x, true), f.saturate(x), f));
  });
}

TEST(DtypeProperty, EncodeIsMonotonic) {
  CheckProperty({2000}, [] {
    const FloatFormat& f = PickFormat();
    float x = InterestingFloat(f), y = InterestingFloat(f);
    RC_PRE(!std::isnan(x) && !std::isnan(y));
    if (y < x) std::swap(x, y);
    const double qx = f.decode(f.encode(x)), qy = f.decode(f.encode(y));
    RC_PRE(!std::isnan(qx) && !std::isnan(qy));  // e4m3fn overflows to NaN
    RC_ASSERT(qx <= qy);
  });
}

TEST(DtypeProperty, QuantiseDequantiseIsIdentityOnRepresentableValues) {
  CheckProperty({2000}, [] {
    const FloatFormat& f = PickFormat();
    const uint32_t code = AnyCode(f);
    RC_PRE(!std::isnan(OracleDecode(f, code)));
    RC_ASSERT(f.encode(f.decode(code)) == code);
    const size_t size = DTypeSize(f.dtype);
    for (DType wide : f.wider) {
      std::byte src[2], mid[8], back[2] = {};
      std::memcpy(src, &code, size);  // little-endian host, as the format
      ConvertElements(src, f.dtype, mid, wide, 1);
      ConvertElements(mid, wide, back, f.dtype, 1);
      RC_ASSERT(std::memcmp(src, back, size) == 0);
      RC_ASSERT(LoadAsDouble(mid, wide, 0) == OracleDecode(f, code));
    }
  });
}

}  // namespace
}  // namespace distckpt
