// Bit-level encoding and decoding of the narrow float formats (f16, bf16,
// fp8 e4m3fn, fp8 e5m2), shared by the scalar conversions (dtype.cc) and the
// bulk conversion loops (convert.cc). Internal to core/: the API is dtype.h.
//
// Encoding rounds once, to nearest with ties to even, from f32 or f64;
// decoding is exact. Both are integer bit manipulation plus, on subnormal
// paths, one floating-point addition that is exact or correctly rounded in
// the default rounding mode, with subnormal operands only where the result is
// zero either way (so flush-to-zero modes do not matter). The code is written
// as selects rather than branches so that loops over it vectorize.
//
// Overflow and NaN follow PyTorch (c10):
//   f16   overflow -> inf,  NaN -> 0x7e00 with the input's sign
//   bf16  overflow -> inf,  NaN -> 0x7fc0 (positive)
//   e4m3fn (no inf) overflow -> NaN 0x7f with sign, NaN -> 0x7f with sign
//   e5m2  overflow -> inf,  NaN -> 0x7f with sign
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_CORE_FLOAT_BITS_H_
#define DISTCKPT_CORE_FLOAT_BITS_H_

#include <bit>
#include <cstdint>
#include <type_traits>

namespace distckpt::float_bits {

// A binary float format: 1 sign bit, kExpBits exponent bits, kMantBits
// mantissa bits, stored in the low bits of Bits.
template <typename BitsT, int kExp, int kMant>
struct Format {
  using Bits = BitsT;
  static constexpr int kExpBits = kExp;
  static constexpr int kMantBits = kMant;
  static constexpr int kWidth = 1 + kExp + kMant;
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr Bits kSignBit = Bits(Bits(1) << (kWidth - 1));
  static constexpr Bits kMantMask = Bits((Bits(1) << kMant) - 1);
  static constexpr Bits kInfBits = Bits(Bits((1 << kExp) - 1) << kMant);  // IEEE +inf pattern
};

// The wide formats conversions start from.
using F64 = Format<uint64_t, 11, 52>;
using F32 = Format<uint32_t, 8, 23>;

// The narrow formats, with their largest finite magnitude, what a
// non-saturating overflow becomes, and their canonical NaN.
struct F16 : Format<uint16_t, 5, 10> {
  static constexpr bool kHasInf = true;
  static constexpr bool kNaNHasSign = true;
  static constexpr Bits kMaxFinite = 0x7bff;
  static constexpr Bits kOverflow = 0x7c00;
  static constexpr Bits kNaN = 0x7e00;
};
struct BF16 : Format<uint16_t, 8, 7> {
  static constexpr bool kHasInf = true;
  static constexpr bool kNaNHasSign = false;
  static constexpr Bits kMaxFinite = 0x7f7f;
  static constexpr Bits kOverflow = 0x7f80;
  static constexpr Bits kNaN = 0x7fc0;
};
struct E4M3FN : Format<uint8_t, 4, 3> {
  // Exponent 1111 holds ordinary numbers; only s.1111.111 is NaN.
  static constexpr bool kHasInf = false;
  static constexpr bool kNaNHasSign = true;
  static constexpr Bits kMaxFinite = 0x7e;  // 448
  static constexpr Bits kOverflow = 0x7f;   // NaN
  static constexpr Bits kNaN = 0x7f;
};
struct E5M2 : Format<uint8_t, 5, 2> {
  static constexpr bool kHasInf = true;
  static constexpr bool kNaNHasSign = true;
  static constexpr Bits kMaxFinite = 0x7b;  // 57344
  static constexpr Bits kOverflow = 0x7c;
  static constexpr Bits kNaN = 0x7f;
};

// Rounds `mag`, the sign-less bits of a non-NaN Src value, to Dst's
// precision. Returns Dst's magnitude bits; a result above Dst::kMaxFinite
// means overflow (the caller applies Dst's rule). Both paths are computed and
// one selected, so that loops over it vectorize.
template <typename Src, typename Dst>
constexpr typename Src::Bits RoundMagnitude(typename Src::Bits mag) {
  using U = typename Src::Bits;
  using Float = std::conditional_t<std::is_same_v<U, uint32_t>, float, double>;
  constexpr int kShift = Src::kMantBits - Dst::kMantBits;
  constexpr int kExpDelta = Src::kBias - Dst::kBias;
  // Dst-normal: drop kShift mantissa bits with a ties-to-even bias; a carry
  // out of the mantissa correctly bumps the exponent (up to infinity).
  const U normal = ((mag + ((U(1) << (kShift - 1)) - 1) + ((mag >> kShift) & 1)) >> kShift) -
                   (U(kExpDelta) << Dst::kMantBits);
  // Dst-subnormal: adding kMagic, whose ulp is Dst's smallest subnormal, makes
  // the FPU round to a multiple of it; the sum's low bits count those units.
  // (Only f32 -> bf16 has non-zero results for subnormal inputs: Encode
  // handles it without floating point.)
  constexpr U kMagic = U(kExpDelta + kShift + 1) << Src::kMantBits;
  const Float sum = std::bit_cast<Float>(mag) + std::bit_cast<Float>(kMagic);
  const U subnormal = std::bit_cast<U>(sum) - kMagic;
  return mag >= (U(kExpDelta + 1) << Src::kMantBits) ? normal : subnormal;
}

// Encodes the Src value `bits` in Dst. kSaturate clamps overflow (finite or
// infinite) to Dst's largest finite value instead of Dst's overflow rule.
template <typename Src, typename Dst, bool kSaturate = false>
constexpr typename Dst::Bits Encode(typename Src::Bits bits) {
  using U = typename Src::Bits;
  using D = typename Dst::Bits;
  if constexpr (std::is_same_v<Src, F32> && std::is_same_v<Dst, BF16> && !kSaturate) {
    // bf16 is truncated f32: the bias trick is exact for every non-NaN input,
    // f32 subnormals and overflow to inf included.
    const uint32_t rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
    return static_cast<D>((bits & ~F32::kSignBit) > F32::kInfBits ? BF16::kNaN : rounded);
  } else {
    const D sign = static_cast<D>((bits & Src::kSignBit) >> (Src::kWidth - Dst::kWidth));
    const U mag = bits & ~Src::kSignBit;
    const U rounded = RoundMagnitude<Src, Dst>(mag);
    constexpr D kOverflow = kSaturate ? Dst::kMaxFinite : Dst::kOverflow;
    const D finite = static_cast<D>(sign | (rounded > Dst::kMaxFinite ? kOverflow : rounded));
    const D nan = static_cast<D>((Dst::kNaNHasSign ? sign : 0) | Dst::kNaN);
    return mag > Src::kInfBits ? nan : finite;
  }
}

// Decodes a narrow-format value to f32 bits (exact: every narrow value is an
// f32 value). NaN payloads move to the top of f32's mantissa.
template <typename Src>
constexpr uint32_t DecodeToF32(typename Src::Bits bits) {
  if constexpr (Src::kExpBits == F32::kExpBits) {
    return uint32_t{bits} << (32 - Src::kWidth);  // bf16: the top half of an f32
  } else {
    constexpr int kShift = F32::kMantBits - Src::kMantBits;
    constexpr uint32_t kExpMask = ((1u << Src::kExpBits) - 1) << F32::kMantBits;
    constexpr uint32_t kRebias = uint32_t(F32::kBias - Src::kBias) << F32::kMantBits;
    const uint32_t sign = uint32_t{bits} >> (Src::kWidth - 1) << 31;
    const uint32_t shifted = uint32_t(bits & ~Src::kSignBit) << kShift;  // exponent at f32's place
    const uint32_t exp = shifted & kExpMask;
    // Normal: rebias the exponent. Inf/NaN: move the exponent up to all ones.
    constexpr uint32_t kNaNShifted = uint32_t{Src::kInfBits | Src::kMantMask} << kShift;
    const bool special = Src::kHasInf ? exp == kExpMask : shifted == kNaNShifted;
    const uint32_t normal = shifted + kRebias + (special ? F32::kInfBits - kExpMask - kRebias : 0);
    // Zero/subnormal: read 1.mant * 2^(1 - bias) and subtract the implicit
    // 2^(1 - bias), exactly (all operands and the result are normal f32s).
    constexpr uint32_t kMinNormal = kRebias + (1u << F32::kMantBits);
    const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(shifted + kMinNormal) -
                                                       std::bit_cast<float>(kMinNormal));
    return sign | (exp == 0 ? subnormal : normal);
  }
}

}  // namespace distckpt::float_bits

#endif  // DISTCKPT_CORE_FLOAT_BITS_H_
