// Widening float conversions on a CUDA device (core/device.h
// ConvertOnDevice): the same bit-level decoding as the host (float_bits.h),
// so a load that converts on the device gets the host's bits, NaN payloads
// included.
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/float_bits.h"

namespace distckpt {
namespace {

namespace fb = float_bits;

template <typename Src>
__device__ float DecodeNarrow(typename Src::Bits bits) {
  return __uint_as_float(fb::DecodeToF32<Src>(bits));
}

template <typename Load, typename Dst>
__global__ void WidenKernel(const void* src, Dst* dst, size_t n, Load load) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = static_cast<Dst>(load(src, i));
  }
}

template <typename Dst, typename Load>
void Launch(const void* src, void* dst, size_t n, cudaStream_t stream, Load load) {
  constexpr int kThreads = 256;
  const size_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  WidenKernel<<<blocks, kThreads, 0, stream>>>(src, static_cast<Dst*>(dst), n, load);
}

template <typename Dst>
void LaunchTo(const void* src, DType src_dtype, void* dst, size_t n, cudaStream_t stream) {
  switch (src_dtype) {
    case DType::kBF16:
      return Launch<Dst>(src, dst, n, stream, [] __device__(const void* s, size_t i) {
        return DecodeNarrow<fb::BF16>(static_cast<const uint16_t*>(s)[i]);
      });
    case DType::kF16:
      return Launch<Dst>(src, dst, n, stream, [] __device__(const void* s, size_t i) {
        return DecodeNarrow<fb::F16>(static_cast<const uint16_t*>(s)[i]);
      });
    default:  // kF32 (DeviceConvertible admits nothing else)
      return Launch<Dst>(src, dst, n, stream, [] __device__(const void* s, size_t i) {
        return static_cast<const float*>(s)[i];
      });
  }
}

}  // namespace

void LaunchWidenKernel(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                       cudaStream_t stream) {
  if (dst_dtype == DType::kF64) {
    LaunchTo<double>(src, src_dtype, dst, n, stream);
  } else {
    LaunchTo<float>(src, src_dtype, dst, n, stream);
  }
}

}  // namespace distckpt
