// Per-tensor-scaled FP8 (Transformer Engine's Float8Tensor, docs/megatron-semantics.md
// §6): value = fp8 code × scale_inv, scale_inv = 1 / scale. Quantising
// multiplies by `scale` in f32 and rounds to nearest even, saturating at the
// format's largest finite value (448 for e4m3fn, 57344 for e5m2) as TE does;
// NaN stays NaN. Dequantising multiplies in f32 and converts to the nominal
// dtype (round to nearest even).
//
// These are the conversions an FP8-aware load uses: an fp8 checkpoint read into
// a bf16/f32 request is dequantised with the checkpoint's scale_inv; a
// bf16/f32 checkpoint read into an fp8 request is quantised with the
// request's scale, reporting how many values saturated. A raw fp8 tensor is
// stored as its codes (bit-exact) with scale_inv as a companion entry.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FP8_QUANTIZE_H_
#define DISTCKPT_FP8_QUANTIZE_H_

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace distckpt {

struct Fp8Quantized {
  Tensor codes;           // kF8E4M3FN or kF8E5M2, same shape as the input
  int64_t saturated = 0;  // finite or infinite inputs clamped to the largest finite value
};

// Throws CheckpointError(kInvalidArgument) unless `fp8` is an fp8 dtype,
// `src` a floating dtype and `scale` finite and positive.
Fp8Quantized QuantizeFp8(const Tensor& src, DType fp8, float scale);

// `codes` (an fp8 dtype) × scale_inv in `nominal` (a floating dtype).
Tensor DequantizeFp8(const Tensor& codes, float scale_inv, DType nominal);

// The companion key that holds a raw fp8 tensor's scale_inv.
std::string ScaleInvKey(const std::string& key);

}  // namespace distckpt

#endif  // DISTCKPT_FP8_QUANTIZE_H_
