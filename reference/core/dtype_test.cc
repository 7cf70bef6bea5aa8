// Tests of DType names, sizes and the element conversions between all
// dtypes (the bit-exact float formats are covered by float_bits_test.cc).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error_testing.h"

namespace distckpt {
namespace {

TEST(DTypeTest, SizesAndNames) {
  const struct {
    DType dtype;
    const char* name;
    size_t size;
    bool floating;
  } kExpected[] = {
      {DType::kF64, "f64", 8, true},
      {DType::kF32, "f32", 4, true},
      {DType::kF16, "f16", 2, true},
      {DType::kBF16, "bf16", 2, true},
      {DType::kF8E4M3FN, "fp8_e4m3fn", 1, true},
      {DType::kF8E5M2, "fp8_e5m2", 1, true},
      {DType::kI8, "i8", 1, false},
      {DType::kI16, "i16", 2, false},
      {DType::kI32, "i32", 4, false},
      {DType::kI64, "i64", 8, false},
      {DType::kU8, "u8", 1, false},
      {DType::kBool, "bool", 1, false},
  };
  ASSERT_EQ(std::size(kExpected), std::size(kAllDTypes));
  for (const auto& e : kExpected) {
    EXPECT_EQ(DTypeName(e.dtype), e.name);
    EXPECT_EQ(DTypeSize(e.dtype), e.size) << e.name;
    EXPECT_EQ(IsFloatingPoint(e.dtype), e.floating) << e.name;
    EXPECT_EQ(ParseDType(e.name), e.dtype) << e.name;
    EXPECT_EQ(DTypeFromName(e.name), e.dtype) << e.name;
  }
}

TEST(DTypeTest, ParsesPyTorchNames) {
  const std::pair<const char*, DType> kNames[] = {
      {"float64", DType::kF64},
      {"double", DType::kF64},
      {"torch.float64", DType::kF64},
      {"float32", DType::kF32},
      {"float", DType::kF32},
      {"torch.float32", DType::kF32},
      {"float16", DType::kF16},
      {"half", DType::kF16},
      {"torch.half", DType::kF16},
      {"bfloat16", DType::kBF16},
      {"torch.bfloat16", DType::kBF16},
      {"float8_e4m3fn", DType::kF8E4M3FN},
      {"torch.float8_e4m3fn", DType::kF8E4M3FN},
      {"float8_e5m2", DType::kF8E5M2},
      {"int8", DType::kI8},
      {"int16", DType::kI16},
      {"short", DType::kI16},
      {"int32", DType::kI32},
      {"int", DType::kI32},
      {"int64", DType::kI64},
      {"long", DType::kI64},
      {"torch.int64", DType::kI64},
      {"uint8", DType::kU8},
      {"bool", DType::kBool},
      {"torch.bool", DType::kBool},
  };
  for (const auto& [name, dtype] : kNames) EXPECT_EQ(ParseDType(name), dtype) << name;
}

TEST(DTypeTest, RejectsUnknownNames) {
  for (const char* name :
       {"", "f8", "float8", "torch.", "torch.f32", "Float32", "uint16", "f32 "}) {
    EXPECT_EQ(ParseDType(name), std::nullopt) << name;
  }
  EXPECT_THAT([] { DTypeFromName("complex64"); },
              ThrowsError(ErrorKind::kInvalidArgument, "'complex64'"));
}

// Writes `values` into a buffer of `dtype` with StoreFromDouble.
std::vector<std::byte> Store(DType dtype, const std::vector<double>& values) {
  std::vector<std::byte> buffer(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) StoreFromDouble(buffer.data(), dtype, i, values[i]);
  return buffer;
}

TEST(DTypeTest, FloatToIntegerTruncatesTowardZero) {
  const std::vector<double> in = {0.0, 2.9, -2.9, 0.5, -0.5, 127.99, 100.0};
  for (DType dtype : {DType::kI8, DType::kI16, DType::kI32, DType::kI64}) {
    const std::vector<std::byte> buffer = Store(dtype, in);
    const std::vector<double> expected = {0, 2, -2, 0, 0, 127, 100};
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(LoadAsDouble(buffer.data(), dtype, i), expected[i])
          << DTypeName(dtype) << " " << in[i];
    }
  }
}

TEST(DTypeTest, IntegerWrapAndSpecialValues) {
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  // Integer narrowing wraps (two's complement), as static_cast does.
  int64_t wide[] = {300, -1, 65537, -129};
  std::vector<uint8_t> u8(4);
  std::vector<int8_t> i8(4);
  ConvertElements(wide, DType::kI64, u8.data(), DType::kU8, 4);
  ConvertElements(wide, DType::kI64, i8.data(), DType::kI8, 4);
  EXPECT_EQ(u8, (std::vector<uint8_t>{44, 255, 1, 127}));
  EXPECT_EQ(i8, (std::vector<int8_t>{44, -1, 1, 127}));
  // NaN has no integer value: it becomes 0. Out-of-range saturates in int64.
  const std::vector<std::byte> i64 = Store(DType::kI64, {kNaN, 1e30, -1e30, -3.0});
  EXPECT_EQ(LoadAsDouble(i64.data(), DType::kI64, 0), 0.0);
  EXPECT_EQ(LoadAsDouble(i64.data(), DType::kI64, 1), 9223372036854775807.0);
  EXPECT_EQ(LoadAsDouble(i64.data(), DType::kI64, 2), -9223372036854775808.0);
  EXPECT_EQ(LoadAsDouble(Store(DType::kU8, {-3.0}).data(), DType::kU8, 0), 253.0);
  // i64 -> f32 rounds once to nearest even; i64 -> f64 is exact below 2^53.
  const int64_t big[] = {(int64_t{1} << 40) + 1, (int64_t{1} << 52) + 1};
  float f32[2];
  double f64[2];
  ConvertElements(big, DType::kI64, f32, DType::kF32, 2);
  ConvertElements(big, DType::kI64, f64, DType::kF64, 2);
  EXPECT_EQ(f32[0], std::ldexp(1.0f, 40));
  EXPECT_EQ(f64[1], std::ldexp(1.0, 52) + 1);
}

TEST(DTypeTest, BoolIsNonZero) {
  const std::vector<std::byte> b = Store(DType::kBool, {0.0, -0.0, 0.25, -7.0, std::nan("")});
  const std::vector<double> expected = {0, 0, 1, 1, 1};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::to_integer<int>(b[i]), expected[i]) << i;
    EXPECT_EQ(LoadAsDouble(b.data(), DType::kBool, i), expected[i]) << i;
  }
  const uint8_t raw[] = {0, 1, 2, 255};  // any non-zero byte reads as true
  uint16_t half[4];
  ConvertElements(raw, DType::kBool, half, DType::kF16, 4);
  EXPECT_EQ(half[0], 0x0000);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(half[i], 0x3c00) << i;
}

// Expected result of casting the (exactly representable) value v to dtype.
double Cast(double v, DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return v != 0 ? 1 : 0;
    case DType::kU8:
      return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case DType::kI8:
      return static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(v)));
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
      return std::trunc(v);
    default:
      return v;  // the samples are exact in every float format
  }
}

TEST(DTypeTest, ConvertsBetweenEveryPair) {
  // Values exact in e5m2 (the coarsest float format); some wrap in i8 or u8.
  const std::vector<double> kFloatValues = {0, 1, -2, 3.5, -6, 0.5, 96, -0.75, 112, 224};
  const std::vector<double> kSignedValues = {0, 1, -2, 3, -6, 96, 112, -128};
  const std::vector<double> kUnsignedValues = {0, 1, 2, 3, 96, 112, 128, 224};
  for (DType src : kAllDTypes) {
    const std::vector<double>& values = src == DType::kBool    ? std::vector<double>{0, 1, 1, 0}
                                        : src == DType::kU8    ? kUnsignedValues
                                        : IsFloatingPoint(src) ? kFloatValues
                                                               : kSignedValues;
    const std::vector<std::byte> in = Store(src, values);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(LoadAsDouble(in.data(), src, i), values[i]) << DTypeName(src);
    }
    for (DType dst : kAllDTypes) {
      // Offset by one byte: conversions must not assume alignment.
      std::vector<std::byte> out(1 + values.size() * DTypeSize(dst));
      ConvertElements(in.data(), src, out.data() + 1, dst, values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(LoadAsDouble(out.data() + 1, dst, i), Cast(values[i], dst))
            << DTypeName(src) << " -> " << DTypeName(dst) << " value " << values[i];
      }
    }
  }
}

TEST(DTypeTest, SameDTypeCopiesBytes) {
  const uint32_t nan_payload = 0x7fa00001;  // a signalling NaN is copied, not quietened
  float in[2];
  std::memcpy(&in[0], &nan_payload, 4);
  in[1] = -0.0f;
  uint32_t out[2];
  ConvertElements(in, DType::kF32, out, DType::kF32, 2);
  EXPECT_EQ(out[0], nan_payload);
  EXPECT_EQ(out[1], 0x80000000u);
  ConvertElements(nullptr, DType::kF32, nullptr, DType::kI8, 0);  // n == 0 touches nothing
}

TEST(DTypeTest, DoubleToFloatRoundsToNearestEven) {
  const double in[] = {1.0 + std::ldexp(1.0, -24), 1.0 + 3 * std::ldexp(1.0, -24), 1e300, -1e300};
  float out[4];
  ConvertElements(in, DType::kF64, out, DType::kF32, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(out[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[3], -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace distckpt
