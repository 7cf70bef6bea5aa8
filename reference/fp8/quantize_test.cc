#include "fp8/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error_testing.h"

namespace distckpt {
namespace {

Tensor F32(std::vector<float> values) {
  Tensor t = Tensor::Empty(DType::kF32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

TEST(Fp8QuantizeTest, ScalesRoundsToNearestEvenAndCountsSaturation) {
  // scale 2: 1.0 -> 2 (exact), 0.5625 -> 1.125 (e4m3fn step 0.125 near 1: exact),
  // 300 -> 600 saturates to 448, -1e30 saturates to -448, NaN stays NaN.
  Fp8Quantized q = QuantizeFp8(F32({1.0f, 0.5625f, 300.0f, -1e30f, NAN}), DType::kF8E4M3FN, 2.0f);
  EXPECT_EQ(q.saturated, 2);
  EXPECT_EQ(E4M3FNToFloat(q.codes.data_as<uint8_t>()[0]), 2.0f);
  EXPECT_EQ(E4M3FNToFloat(q.codes.data_as<uint8_t>()[1]), 1.125f);
  EXPECT_EQ(E4M3FNToFloat(q.codes.data_as<uint8_t>()[2]), 448.0f);
  EXPECT_EQ(E4M3FNToFloat(q.codes.data_as<uint8_t>()[3]), -448.0f);
  EXPECT_TRUE(std::isnan(E4M3FNToFloat(q.codes.data_as<uint8_t>()[4])));
  // Ties go to even: 1.0625 is halfway between 1.0 (mantissa 000) and 1.125 (001).
  EXPECT_EQ(E4M3FNToFloat(
                QuantizeFp8(F32({1.0625f}), DType::kF8E4M3FN, 1.0f).codes.data_as<uint8_t>()[0]),
            1.0f);
  Fp8Quantized e5 = QuantizeFp8(F32({1e6f, 3.0f}), DType::kF8E5M2, 1.0f);
  EXPECT_EQ(e5.saturated, 1);
  EXPECT_EQ(E5M2ToFloat(e5.codes.data_as<uint8_t>()[0]), 57344.0f);
}

TEST(Fp8QuantizeTest, DequantisesIntoTheNominalDtype) {
  Tensor codes = QuantizeFp8(F32({4.0f, -0.75f}), DType::kF8E4M3FN, 0.5f).codes;  // 2, -0.375
  Tensor bf16 = DequantizeFp8(codes, 2.0f, DType::kBF16);
  EXPECT_EQ(bf16.dtype(), DType::kBF16);
  EXPECT_EQ(bf16.At(0), 4.0);
  EXPECT_EQ(bf16.At(1), -0.75);
}

// Every code of both formats: dequantise with a power-of-two scale_inv and
// quantise back with its scale gives the same bits, except where TE's
// saturation changes them (e5m2 infinities clamp to the largest finite value).
TEST(Fp8QuantizeTest, AllCodesRoundTripThroughDequantiseAndQuantise) {
  for (DType fp8 : {DType::kF8E4M3FN, DType::kF8E5M2}) {
    Tensor codes = Tensor::Empty(fp8, {256});
    for (int c = 0; c < 256; ++c) codes.data_as<uint8_t>()[c] = static_cast<uint8_t>(c);
    Tensor f32 = DequantizeFp8(codes, 0.25f, DType::kF32);
    Fp8Quantized back = QuantizeFp8(f32, fp8, 4.0f);
    EXPECT_EQ(back.saturated, fp8 == DType::kF8E5M2 ? 2 : 0);
    for (int c = 0; c < 256; ++c) {
      float v = f32.data_as<float>()[c];
      uint8_t got = back.codes.data_as<uint8_t>()[c];
      if (std::isinf(v)) {
        EXPECT_EQ(E5M2ToFloat(got), std::copysign(57344.0f, v)) << c;
      } else if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(fp8 == DType::kF8E4M3FN ? E4M3FNToFloat(got) : E5M2ToFloat(got)))
            << c;
      } else {
        EXPECT_EQ(got, c) << DTypeName(fp8) << " code " << c;
      }
    }
  }
}

TEST(Fp8QuantizeTest, RefusesUndefinedConversions) {
  EXPECT_THAT([] { QuantizeFp8(F32({1}), DType::kBF16, 1.0f); },
              ThrowsError(ErrorKind::kInvalidArgument, "into bf16"));
  EXPECT_THAT([] { QuantizeFp8(F32({1}), DType::kF8E5M2, 0.0f); },
              ThrowsError(ErrorKind::kInvalidArgument, "scale 0"));
  EXPECT_THAT([] { DequantizeFp8(F32({1}), 1.0f, DType::kF32); },
              ThrowsError(ErrorKind::kInvalidArgument, "dequantisation of f32"));
  EXPECT_EQ(ScaleInvKey("w"), "w._scale_inv");
}

}  // namespace
}  // namespace distckpt
