// Exhaustive tests of the narrow float formats (f16, bf16, fp8 e4m3fn, fp8
// e5m2) against an independent oracle: decoding by the sign/exponent/mantissa
// formula, and encoding by a search for the nearest representable value
// (ties to even) over the oracle's sorted list of values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace distckpt {
namespace {

struct FormatCase {
  const char* name;
  DType dtype;
  int exp_bits;
  int mant_bits;
  bool has_inf;  // IEEE-style: exponent all ones is inf/NaN (else only s.1..1.1..1 is NaN)
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
  uint32_t (*saturate)(float);  // null where there is no saturating variant
};

void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.name; }

const FormatCase kCases[] = {
    {"f16", DType::kF16, 5, 10, true, [](float x) -> uint32_t { return FloatToHalf(x); },
     [](uint32_t p) { return HalfToFloat(static_cast<uint16_t>(p)); }, nullptr},
    {"bf16", DType::kBF16, 8, 7, true, [](float x) -> uint32_t { return FloatToBFloat16(x); },
     [](uint32_t p) { return BFloat16ToFloat(static_cast<uint16_t>(p)); }, nullptr},
    {"e4m3fn", DType::kF8E4M3FN, 4, 3, false, [](float x) -> uint32_t { return FloatToE4M3FN(x); },
     [](uint32_t p) { return E4M3FNToFloat(static_cast<uint8_t>(p)); },
     [](float x) -> uint32_t { return SaturateToE4M3FN(x); }},
    {"e5m2", DType::kF8E5M2, 5, 2, true, [](float x) -> uint32_t { return FloatToE5M2(x); },
     [](uint32_t p) { return E5M2ToFloat(static_cast<uint8_t>(p)); },
     [](float x) -> uint32_t { return SaturateToE5M2(x); }},
};

// The reference model of one format.
class Oracle {
 public:
  explicit Oracle(const FormatCase& c)
      : c_(c), width_(1 + c.exp_bits + c.mant_bits), bias_((1 << (c.exp_bits - 1)) - 1) {
    // Positive patterns in increasing order are the non-negative values in
    // increasing order, so values_[code] is the value of `code`.
    for (uint32_t code = 0; !std::isinf(Decode(code)) && !std::isnan(Decode(code)); ++code) {
      values_.push_back(Decode(code));
    }
    // The next value up if the exponent range continued: overflow starts at
    // the midpoint between the largest finite value and it.
    const uint32_t next = static_cast<uint32_t>(values_.size());
    values_.push_back(std::ldexp((next & MantMask()) + (1 << c_.mant_bits),
                                 static_cast<int>(next >> c_.mant_bits) - bias_ - c_.mant_bits));
  }

  int width() const { return width_; }
  uint32_t num_patterns() const { return 1u << width_; }
  uint32_t max_finite() const { return static_cast<uint32_t>(values_.size()) - 2; }
  // Non-negative finite values followed by the overflow threshold's upper neighbour.
  const std::vector<double>& values() const { return values_; }

  double Decode(uint32_t p) const {
    const bool negative = (p >> (width_ - 1)) & 1;
    const int exp = static_cast<int>((p >> c_.mant_bits) & ((1u << c_.exp_bits) - 1));
    const uint32_t mant = p & MantMask();
    const int exp_max = (1 << c_.exp_bits) - 1;
    double magnitude;
    if (c_.has_inf && exp == exp_max) {
      magnitude = mant == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
    } else if (!c_.has_inf && exp == exp_max && mant == MantMask()) {
      magnitude = std::nan("");
    } else if (exp == 0) {
      magnitude = std::ldexp(mant, 1 - bias_ - c_.mant_bits);
    } else {
      magnitude = std::ldexp(mant + (1u << c_.mant_bits), exp - bias_ - c_.mant_bits);
    }
    return negative ? -magnitude : magnitude;
  }

  // The expected pattern for a non-NaN x: nearest value, ties to the even
  // pattern; beyond the largest finite value PyTorch's rules (inf for f16,
  // bf16 and e5m2, NaN for e4m3fn) or, saturating, the largest finite value.
  uint32_t Encode(double x, bool saturate) const {
    const uint32_t sign = std::signbit(x) ? 1u << (width_ - 1) : 0;
    const double a = std::fabs(x);
    const auto it = std::lower_bound(values_.begin(), values_.end(), a);
    uint32_t code;
    if (it == values_.end()) {
      code = static_cast<uint32_t>(values_.size()) - 1;
    } else {
      code = static_cast<uint32_t>(it - values_.begin());
      if (*it != a) {
        const double below = a - values_[code - 1];
        const double above = *it - a;
        if (below < above || (below == above && (code & 1))) --code;
      }
    }
    if (code > max_finite()) {
      // The pattern after the largest finite one is inf (IEEE) or NaN (e4m3fn).
      code = saturate ? max_finite() : max_finite() + 1;
    }
    return sign | code;
  }

 private:
  uint32_t MantMask() const { return (1u << c_.mant_bits) - 1; }

  const FormatCase& c_;
  int width_;
  int bias_;
  std::vector<double> values_;
};

// Test inputs around every rounding boundary: each value, the midpoints
// between neighbours, and the nearest doubles / floats on both sides.
struct Probes {
  std::vector<double> doubles;
  std::vector<float> floats;
};

Probes MakeProbes(const Oracle& oracle) {
  Probes probes;
  const std::vector<double>& v = oracle.values();
  const double kInf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const double mid = (v[i] + v[i + 1]) / 2;
    for (double d : {v[i], mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) {
      probes.doubles.push_back(d);
      probes.doubles.push_back(-d);
    }
    const float fmid = static_cast<float>(mid);
    EXPECT_EQ(static_cast<double>(fmid), mid) << "midpoints must be exact in f32";
    for (float f : {static_cast<float>(v[i]), fmid, std::nextafter(fmid, 0.0f),
                    std::nextafter(fmid, std::numeric_limits<float>::infinity())}) {
      probes.floats.push_back(f);
      probes.floats.push_back(-f);
    }
  }
  for (double d : {v.back(), v.back() * 3, 1e300, kInf, 1e-300, 4.9e-324}) {
    probes.doubles.push_back(d);
    probes.doubles.push_back(-d);
  }
  for (float f : {std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), 1e-30f}) {
    probes.floats.push_back(f);
    probes.floats.push_back(-f);
  }
  return probes;
}

// Reads element i of a buffer of `dtype` as its bit pattern.
uint32_t PatternAt(const std::vector<uint8_t>& buffer, DType dtype, size_t i) {
  uint32_t pattern = 0;
  std::memcpy(&pattern, buffer.data() + i * DTypeSize(dtype), DTypeSize(dtype));
  return pattern;
}

// Every pattern of a format, in a buffer of its dtype, and the patterns'
// values as ConvertElements decodes them to f32 and f64.
struct AllPatterns {
  std::vector<uint8_t> bits;
  std::vector<float> f32;
  std::vector<double> f64;

  AllPatterns(const FormatCase& c, const Oracle& oracle)
      : bits(oracle.num_patterns() * DTypeSize(c.dtype)),
        f32(oracle.num_patterns()),
        f64(oracle.num_patterns()) {
    for (uint32_t p = 0; p < oracle.num_patterns(); ++p) {
      std::memcpy(bits.data() + p * DTypeSize(c.dtype), &p, DTypeSize(c.dtype));
    }
    ConvertElements(bits.data(), c.dtype, f32.data(), DType::kF32, f32.size());
    ConvertElements(bits.data(), c.dtype, f64.data(), DType::kF64, f64.size());
  }
};

class FloatFormatTest : public testing::TestWithParam<FormatCase> {};

TEST_P(FloatFormatTest, DecodesEveryPattern) {
  const FormatCase& c = GetParam();
  const Oracle oracle(c);
  const AllPatterns all(c, oracle);
  for (uint32_t p = 0; p < oracle.num_patterns(); ++p) {
    const double expected = oracle.Decode(p);
    for (double got : {static_cast<double>(c.decode(p)), static_cast<double>(all.f32[p]),
                       all.f64[p], LoadAsDouble(all.bits.data(), c.dtype, p)}) {
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(got)) << c.name << " pattern " << p;
      } else {
        ASSERT_EQ(got, expected) << c.name << " pattern " << p;
        ASSERT_EQ(std::signbit(got), std::signbit(expected)) << c.name << " pattern " << p;
      }
    }
  }
}

TEST_P(FloatFormatTest, EncodesEveryDecodedPatternBack) {
  const FormatCase& c = GetParam();
  const Oracle oracle(c);
  const AllPatterns all(c, oracle);
  std::vector<uint8_t> from_f32(all.bits.size());
  std::vector<uint8_t> from_f64(all.bits.size());
  ConvertElements(all.f32.data(), DType::kF32, from_f32.data(), c.dtype, all.f32.size());
  ConvertElements(all.f64.data(), DType::kF64, from_f64.data(), c.dtype, all.f64.size());
  for (uint32_t p = 0; p < oracle.num_patterns(); ++p) {
    const uint32_t scalar = c.encode(c.decode(p));
    if (std::isnan(oracle.Decode(p))) {
      ASSERT_TRUE(std::isnan(oracle.Decode(scalar))) << c.name << " pattern " << p;
      ASSERT_TRUE(std::isnan(oracle.Decode(PatternAt(from_f32, c.dtype, p))));
      ASSERT_TRUE(std::isnan(oracle.Decode(PatternAt(from_f64, c.dtype, p))));
      continue;
    }
    ASSERT_EQ(scalar, p) << c.name;
    ASSERT_EQ(PatternAt(from_f32, c.dtype, p), p) << c.name;
    ASSERT_EQ(PatternAt(from_f64, c.dtype, p), p) << c.name;
  }
}

TEST_P(FloatFormatTest, RoundsToNearestEvenAtEveryBoundary) {
  const FormatCase& c = GetParam();
  const Oracle oracle(c);
  const Probes probes = MakeProbes(oracle);
  std::vector<uint8_t> from_f32(probes.floats.size() * DTypeSize(c.dtype));
  std::vector<uint8_t> from_f64(probes.doubles.size() * DTypeSize(c.dtype));
  ConvertElements(probes.floats.data(), DType::kF32, from_f32.data(), c.dtype,
                  probes.floats.size());
  ConvertElements(probes.doubles.data(), DType::kF64, from_f64.data(), c.dtype,
                  probes.doubles.size());
  for (size_t i = 0; i < probes.floats.size(); ++i) {
    const float x = probes.floats[i];
    const uint32_t expected = oracle.Encode(x, /*saturate=*/false);
    ASSERT_EQ(c.encode(x), expected) << c.name << " from f32 " << x;
    ASSERT_EQ(PatternAt(from_f32, c.dtype, i), expected) << c.name << " bulk from f32 " << x;
    if (c.saturate != nullptr) {
      ASSERT_EQ(c.saturate(x), oracle.Encode(x, /*saturate=*/true))
          << c.name << " saturating " << x;
    }
  }
  // f64 sources round once (not via f32, which would round ties twice).
  for (size_t i = 0; i < probes.doubles.size(); ++i) {
    const double x = probes.doubles[i];
    ASSERT_EQ(PatternAt(from_f64, c.dtype, i), oracle.Encode(x, /*saturate=*/false))
        << c.name << " from f64 " << x;
  }
}

TEST_P(FloatFormatTest, ConvertsEveryPatternToEveryOtherFormat) {
  const FormatCase& src = GetParam();
  const Oracle src_oracle(src);
  const AllPatterns all(src, src_oracle);
  for (const FormatCase& dst : kCases) {
    if (dst.dtype == src.dtype) continue;
    const Oracle dst_oracle(dst);
    std::vector<uint8_t> out(src_oracle.num_patterns() * DTypeSize(dst.dtype));
    ConvertElements(all.bits.data(), src.dtype, out.data(), dst.dtype, src_oracle.num_patterns());
    for (uint32_t p = 0; p < src_oracle.num_patterns(); ++p) {
      const double value = src_oracle.Decode(p);
      const uint32_t got = PatternAt(out, dst.dtype, p);
      if (std::isnan(value)) {
        ASSERT_TRUE(std::isnan(dst_oracle.Decode(got))) << src.name << "->" << dst.name << " " << p;
      } else {
        ASSERT_EQ(got, dst_oracle.Encode(value, false)) << src.name << "->" << dst.name << " " << p;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FloatFormatTest, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<FormatCase>& info) {
                           return std::string(info.param.name);
                         });

// PyTorch's overflow and NaN rules, spelled out.
TEST(FloatFormatRulesTest, E4M3FNHasNoInfinity) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToE4M3FN(448.0f), 0x7e);
  EXPECT_EQ(FloatToE4M3FN(464.0f), 0x7e);  // tie between 448 and (480) goes to even 448
  EXPECT_EQ(FloatToE4M3FN(std::nextafter(464.0f, 500.0f)), 0x7f);  // rounds into the NaN pattern
  EXPECT_EQ(FloatToE4M3FN(480.0f), 0x7f);
  EXPECT_EQ(FloatToE4M3FN(-1e9f), 0xff);
  EXPECT_EQ(FloatToE4M3FN(kInf), 0x7f);
  EXPECT_EQ(FloatToE4M3FN(-kInf), 0xff);
  EXPECT_EQ(FloatToE4M3FN(kNaN), 0x7f);
  EXPECT_EQ(FloatToE4M3FN(-kNaN), 0xff);
  EXPECT_EQ(SaturateToE4M3FN(1e9f), 0x7e);
  EXPECT_EQ(SaturateToE4M3FN(-kInf), 0xfe);
  EXPECT_TRUE(std::isnan(E4M3FNToFloat(SaturateToE4M3FN(kNaN))));
  EXPECT_EQ(E4M3FNToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4M3FNToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(E4M3FNToFloat(0xff)));
  EXPECT_FALSE(std::isnan(E4M3FNToFloat(0x78)));  // 256: exponent 1111 is an ordinary binade
}

TEST(FloatFormatRulesTest, E5M2OverflowsToInfinity) {
  const float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToE5M2(57344.0f), 0x7b);
  EXPECT_EQ(FloatToE5M2(std::nextafter(61440.0f, 0.0f)), 0x7b);
  EXPECT_EQ(FloatToE5M2(61440.0f), 0x7c);  // tie goes to the even pattern, inf
  EXPECT_EQ(FloatToE5M2(-kInf), 0xfc);
  EXPECT_EQ(FloatToE5M2(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(SaturateToE5M2(kInf), 0x7b);
  EXPECT_EQ(SaturateToE5M2(-1e6f), 0xfb);
  EXPECT_EQ(E5M2ToFloat(0x7c), kInf);
}

TEST(FloatFormatRulesTest, HalfAndBFloat16Specials) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(kNaN), 0x7e00);
  EXPECT_EQ(FloatToHalf(-kNaN), 0xfe00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(-1e-10f), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(FloatToBFloat16(kNaN), 0x7fc0);
  EXPECT_EQ(FloatToBFloat16(-kNaN), 0x7fc0);        // c10 drops the NaN's sign
  EXPECT_EQ(FloatToBFloat16(1.00390625f), 0x3f80);  // 1 + 2^-8: tie to even 1.0
  EXPECT_EQ(FloatToBFloat16(1.01171875f), 0x3f82);  // 1 + 3*2^-8: tie to even 1 + 2^-6
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(BFloat16ToFloat(0x0001), std::ldexp(1.0f, -133));
}

}  // namespace
}  // namespace distckpt
