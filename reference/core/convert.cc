// Element conversions between all DTypes: one tight, inlined loop per
// (source, destination) pair, selected by a two-level switch.
//
// Each element is loaded as a "natural" value (double for f64, float for the
// float formats that fit in f32, int64_t for integers, bool) and stored with
// PyTorch cast semantics; f64 narrows to the small float formats in a single
// rounding. Buffers may be unaligned (elements are accessed through memcpy).
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float_bits.h"

namespace distckpt {

namespace {

namespace fb = float_bits;

// Float -> integer: truncation toward zero for in-range values. NaN becomes
// 0, out-of-range values saturate to int64 and then wrap to the target width
// (defined behaviour where static_cast would be undefined).
template <typename Int, typename F>
Int FloatToInt(F value) {
  if (std::isnan(value)) return 0;
  constexpr F kTwo63 = static_cast<F>(9223372036854775808.0);  // 2^63, exact in float and double
  int64_t wide;
  if (value >= kTwo63) {
    wide = std::numeric_limits<int64_t>::max();
  } else if (value < -kTwo63) {
    wide = std::numeric_limits<int64_t>::min();
  } else {
    wide = static_cast<int64_t>(value);
  }
  return static_cast<Int>(wide);
}

// A storage type plus how to load an element as a natural value and store
// any natural value (double, float, int64_t or bool).
template <typename StorageT, typename ValueT>
struct Plain {
  using Storage = StorageT;
  static ValueT Load(Storage s) { return static_cast<ValueT>(s); }
  template <typename V>
  static Storage Store(V v) {
    if constexpr (std::is_integral_v<Storage> && std::is_floating_point_v<V>) {
      return FloatToInt<Storage>(v);
    } else {
      return static_cast<Storage>(v);
    }
  }
};

template <typename Format>
struct Narrow {
  using Storage = typename Format::Bits;
  static float Load(Storage s) { return std::bit_cast<float>(fb::DecodeToF32<Format>(s)); }
  template <typename V>
  static Storage Store(V v) {
    if constexpr (std::is_same_v<V, double>) {
      return fb::Encode<fb::F64, Format>(std::bit_cast<uint64_t>(v));
    } else {
      return fb::Encode<fb::F32, Format>(std::bit_cast<uint32_t>(static_cast<float>(v)));
    }
  }
};

struct BoolElem {
  using Storage = uint8_t;
  static bool Load(Storage s) { return s != 0; }
  template <typename V>
  static Storage Store(V v) {
    return v != 0 ? 1 : 0;
  }
};

template <DType D>
struct Elem;
template <>
struct Elem<DType::kF64> : Plain<double, double> {};
template <>
struct Elem<DType::kF32> : Plain<float, float> {};
template <>
struct Elem<DType::kF16> : Narrow<fb::F16> {};
template <>
struct Elem<DType::kBF16> : Narrow<fb::BF16> {};
template <>
struct Elem<DType::kF8E4M3FN> : Narrow<fb::E4M3FN> {};
template <>
struct Elem<DType::kF8E5M2> : Narrow<fb::E5M2> {};
template <>
struct Elem<DType::kI8> : Plain<int8_t, int64_t> {};
template <>
struct Elem<DType::kI16> : Plain<int16_t, int64_t> {};
template <>
struct Elem<DType::kI32> : Plain<int32_t, int64_t> {};
template <>
struct Elem<DType::kI64> : Plain<int64_t, int64_t> {};
template <>
struct Elem<DType::kU8> : Plain<uint8_t, int64_t> {};
template <>
struct Elem<DType::kBool> : BoolElem {};

// Calls fn.template operator()<D>() for the runtime `dtype`.
template <typename Fn>
void VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn.template operator()<DType::kF64>();
    case DType::kF32:
      return fn.template operator()<DType::kF32>();
    case DType::kF16:
      return fn.template operator()<DType::kF16>();
    case DType::kBF16:
      return fn.template operator()<DType::kBF16>();
    case DType::kF8E4M3FN:
      return fn.template operator()<DType::kF8E4M3FN>();
    case DType::kF8E5M2:
      return fn.template operator()<DType::kF8E5M2>();
    case DType::kI8:
      return fn.template operator()<DType::kI8>();
    case DType::kI16:
      return fn.template operator()<DType::kI16>();
    case DType::kI32:
      return fn.template operator()<DType::kI32>();
    case DType::kI64:
      return fn.template operator()<DType::kI64>();
    case DType::kU8:
      return fn.template operator()<DType::kU8>();
    case DType::kBool:
      return fn.template operator()<DType::kBool>();
  }
  Fail(ErrorKind::kInvalidArgument, "invalid DType value {}", static_cast<int>(dtype));
}

template <DType S, DType D>
void ConvertLoop(const std::byte* src, std::byte* dst, size_t n) {
  using In = typename Elem<S>::Storage;
  using Out = typename Elem<D>::Storage;
  for (size_t i = 0; i < n; ++i) {
    In in;
    std::memcpy(&in, src + i * sizeof(In), sizeof(In));
    const Out out = Elem<D>::Store(Elem<S>::Load(in));
    std::memcpy(dst + i * sizeof(Out), &out, sizeof(Out));
  }
}

}  // namespace

void ConvertElements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memcpy(dst, src, n * DTypeSize(src_dtype));
    return;
  }
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  VisitDType(src_dtype, [&]<DType S>() {
    VisitDType(dst_dtype, [&]<DType D>() { ConvertLoop<S, D>(in, out, n); });
  });
}

double LoadAsDouble(const void* data, DType dtype, size_t i) {
  double value;
  ConvertElements(static_cast<const std::byte*>(data) + i * DTypeSize(dtype), dtype, &value,
                  DType::kF64, 1);
  return value;
}

void StoreFromDouble(void* data, DType dtype, size_t i, double value) {
  ConvertElements(&value, DType::kF64, static_cast<std::byte*>(data) + i * DTypeSize(dtype), dtype,
                  1);
}

}  // namespace distckpt
