// Element types and conversions between them.
//
// DType names are the contract used in scenario files and metadata.json:
// f64 f32 f16 bf16 fp8_e4m3fn fp8_e5m2 i8 i16 i32 i64 u8 bool.
//
// Float conversions follow PyTorch's casts exactly (c10::Half, c10::BFloat16,
// c10::Float8_e4m3fn, c10::Float8_e5m2): round to nearest, ties to even;
// NaN stays NaN. Narrowing casts to fp8 do NOT saturate (PyTorch semantics):
// e4m3fn has no infinity, so |x| >= 480 (and +-inf) becomes NaN (0x7f/0xff);
// e5m2 overflows to +-inf (|x| >= 61440 rounds to inf). The Saturate* variants
// clamp finite and infinite inputs to the largest finite value (448 / 57344),
// as Transformer Engine's quantisation does; NaN stays NaN.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_CORE_DTYPE_H_
#define DISTCKPT_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace distckpt {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3FN,
  kF8E5M2,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
};

inline constexpr DType kAllDTypes[] = {DType::kF64,      DType::kF32,    DType::kF16, DType::kBF16,
                                       DType::kF8E4M3FN, DType::kF8E5M2, DType::kI8,  DType::kI16,
                                       DType::kI32,      DType::kI64,    DType::kU8,  DType::kBool};

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);
// Accepts our names and PyTorch's ("float32", "torch.bfloat16", "float8_e4m3fn", "int64", ...).
std::optional<DType> ParseDType(std::string_view name);
// Like ParseDType, but throws CheckpointError(kInvalidArgument) naming the bad name.
DType DTypeFromName(std::string_view name);
bool IsFloatingPoint(DType dtype);  // fp8 included
bool IsFp8(DType dtype);            // kF8E4M3FN or kF8E5M2

// Scalar conversions (bit patterns in/out).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);
uint8_t FloatToE4M3FN(float value);
float E4M3FNToFloat(uint8_t bits);
uint8_t FloatToE5M2(float value);
float E5M2ToFloat(uint8_t bits);
uint8_t SaturateToE4M3FN(float value);
uint8_t SaturateToE5M2(float value);

// Reads element i of a buffer of `dtype` as a double / writes a double with
// PyTorch cast semantics (float->int truncates toward zero; bool is x != 0).
// Where C++ leaves a cast undefined, float->int maps NaN to 0 and saturates
// to int64 before wrapping to the integer's width. Buffers need no alignment.
double LoadAsDouble(const void* data, DType dtype, size_t i);
void StoreFromDouble(void* data, DType dtype, size_t i, double value);

// Converts n elements. Same dtype is a memcpy. Float->float conversions that
// go through f32 are exact for every source value (f64 sources round once).
void ConvertElements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace distckpt

#endif  // DISTCKPT_CORE_DTYPE_H_
