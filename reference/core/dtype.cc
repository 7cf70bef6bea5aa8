// DType names, sizes and the scalar float conversions. The bulk conversions
// (ConvertElements and friends) live in convert.cc.
#include "core/dtype.h"

#include <bit>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/float_bits.h"

namespace distckpt {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool floating_point;
};

// Indexed by DType's value.
constexpr DTypeInfo kInfo[] = {
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
static_assert(std::size(kInfo) == std::size(kAllDTypes));

struct Alias {
  std::string_view name;
  DType dtype;
};

// PyTorch's dtype names (torch.<name>), including its legacy aliases.
constexpr Alias kTorchNames[] = {
    {"float64", DType::kF64},        {"double", DType::kF64},
    {"float32", DType::kF32},        {"float", DType::kF32},
    {"float16", DType::kF16},        {"half", DType::kF16},
    {"bfloat16", DType::kBF16},      {"float8_e4m3fn", DType::kF8E4M3FN},
    {"float8_e5m2", DType::kF8E5M2}, {"int8", DType::kI8},
    {"int16", DType::kI16},          {"short", DType::kI16},
    {"int32", DType::kI32},          {"int", DType::kI32},
    {"int64", DType::kI64},          {"long", DType::kI64},
    {"uint8", DType::kU8},           {"bool", DType::kBool},
};

const DTypeInfo& Info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index >= std::size(kInfo)) Fail(ErrorKind::kInvalidArgument, "invalid DType value {}", index);
  return kInfo[index];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

bool IsFloatingPoint(DType dtype) { return Info(dtype).floating_point; }
bool IsFp8(DType dtype) { return dtype == DType::kF8E4M3FN || dtype == DType::kF8E5M2; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kInfo) {
    if (info.name == name) return info.dtype;
  }
  constexpr std::string_view kTorchPrefix = "torch.";
  if (name.starts_with(kTorchPrefix)) name.remove_prefix(kTorchPrefix.size());
  for (const Alias& alias : kTorchNames) {
    if (alias.name == name) return alias.dtype;
  }
  return std::nullopt;
}

DType DTypeFromName(std::string_view name) {
  if (std::optional<DType> dtype = ParseDType(name)) return *dtype;
  std::string known;
  for (const DTypeInfo& info : kInfo) {
    if (!known.empty()) known += ", ";
    known += info.name;
  }
  Fail(ErrorKind::kInvalidArgument,
       "unknown dtype '{}' (expected one of {}, or a PyTorch dtype name)", name, known);
}

using float_bits::BF16;
using float_bits::DecodeToF32;
using float_bits::E4M3FN;
using float_bits::E5M2;
using float_bits::Encode;
using float_bits::F16;
using float_bits::F32;

uint16_t FloatToHalf(float value) { return Encode<F32, F16>(std::bit_cast<uint32_t>(value)); }
float HalfToFloat(uint16_t bits) { return std::bit_cast<float>(DecodeToF32<F16>(bits)); }

uint16_t FloatToBFloat16(float value) { return Encode<F32, BF16>(std::bit_cast<uint32_t>(value)); }
float BFloat16ToFloat(uint16_t bits) { return std::bit_cast<float>(DecodeToF32<BF16>(bits)); }

uint8_t FloatToE4M3FN(float value) { return Encode<F32, E4M3FN>(std::bit_cast<uint32_t>(value)); }
float E4M3FNToFloat(uint8_t bits) { return std::bit_cast<float>(DecodeToF32<E4M3FN>(bits)); }

uint8_t FloatToE5M2(float value) { return Encode<F32, E5M2>(std::bit_cast<uint32_t>(value)); }
float E5M2ToFloat(uint8_t bits) { return std::bit_cast<float>(DecodeToF32<E5M2>(bits)); }

uint8_t SaturateToE4M3FN(float value) {
  return Encode<F32, E4M3FN, /*kSaturate=*/true>(std::bit_cast<uint32_t>(value));
}
uint8_t SaturateToE5M2(float value) {
  return Encode<F32, E5M2, /*kSaturate=*/true>(std::bit_cast<uint32_t>(value));
}

}  // namespace distckpt
