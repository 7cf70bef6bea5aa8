#include "fp8/quantize.h"

#include <cmath>

#include "core/error.h"

namespace distckpt {
Fp8Quantized QuantizeFp8(const Tensor& src, DType fp8, float scale) {
  if (!IsFp8(fp8) || !IsFloatingPoint(src.dtype()) || !std::isfinite(scale) || scale <= 0) {
    Fail(ErrorKind::kInvalidArgument, "fp8 quantisation of {} into {} with scale {} is not defined",
         DTypeName(src.dtype()), DTypeName(fp8), scale);
  }
  const float max_finite = fp8 == DType::kF8E4M3FN ? 448.0f : 57344.0f;
  Fp8Quantized out{Tensor::Empty(fp8, src.shape()), 0};
  auto* codes = out.codes.data_as<uint8_t>();
  for (int64_t i = 0; i < src.numel(); ++i) {
    float scaled = static_cast<float>(src.At(i)) * scale;
    if (!std::isnan(scaled) && std::fabs(scaled) > max_finite) ++out.saturated;
    codes[i] = fp8 == DType::kF8E4M3FN ? SaturateToE4M3FN(scaled) : SaturateToE5M2(scaled);
  }
  return out;
}

Tensor DequantizeFp8(const Tensor& codes, float scale_inv, DType nominal) {
  if (!IsFp8(codes.dtype()) || !IsFloatingPoint(nominal)) {
    Fail(ErrorKind::kInvalidArgument, "fp8 dequantisation of {} into {} is not defined",
         DTypeName(codes.dtype()), DTypeName(nominal));
  }
  Tensor out = Tensor::Empty(nominal, codes.shape());
  const auto* bits = codes.data_as<uint8_t>();
  for (int64_t i = 0; i < codes.numel(); ++i) {
    float v = codes.dtype() == DType::kF8E4M3FN ? E4M3FNToFloat(bits[i]) : E5M2ToFloat(bits[i]);
    StoreFromDouble(out.data(), nominal, static_cast<size_t>(i),
                    static_cast<double>(v * scale_inv));
  }
  return out;
}

std::string ScaleInvKey(const std::string& key) { return key + "._scale_inv"; }

}  // namespace distckpt
