// core/device.h and device tensors on a real CUDA device (label gpu; skipped
// without one).
#include "core/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/error_testing.h"
#include "core/tensor.h"

namespace distckpt {
namespace {

Tensor Iota(DType dtype, int64_t n) {
  Tensor t = Tensor::Empty(dtype, {n});
  std::mt19937 rng(static_cast<uint32_t>(n));
  for (size_t i = 0; i < t.nbytes(); ++i) t.data()[i] = std::byte(rng() & 0xff);
  return t;
}

TEST(DeviceTest, TensorRoundTripsThroughTheDevice) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
    Tensor host = Iota(DType::kF32, n);
    Tensor dev = host.To(Device::Cuda());
    EXPECT_TRUE(dev.on_cuda());
    EXPECT_NE(dev.raw_data(), host.raw_data());
    Tensor copy = dev.Clone();  // device to device
    EXPECT_TRUE(copy.on_cuda());
    EXPECT_TRUE(copy.To(Device::Cpu()).Equals(host)) << n;
  }
}

TEST(DeviceTest, HostAccessorsRefuseDeviceTensors) {
  Tensor dev = Tensor::Empty(DType::kBF16, {4, 8}, Device::Cuda());
  EXPECT_THAT([&] { dev.data(); }, ThrowsError(ErrorKind::kUnsupported, "is on cuda:0"));
  EXPECT_THAT([&] { dev.At(0); },
              ThrowsError(ErrorKind::kUnsupported, "Tensor::To(Device::Cpu())"));
  EXPECT_THAT([&] { dev.Slice(Box{{0, 0}, {1, 1}}); }, ThrowsError(ErrorKind::kUnsupported));
}

TEST(DeviceTest, CopyFromChecksSizes) {
  Tensor dev = Tensor::Empty(DType::kF32, {8}, Device::Cuda());
  EXPECT_THAT([&] { dev.CopyFrom(Iota(DType::kF32, 7)); },
              ThrowsError(ErrorKind::kInvalidArgument, "28 bytes"));
  Tensor host = Iota(DType::kF32, 8);
  dev.CopyFrom(host);
  Tensor back = Tensor::Zeros(DType::kF32, {8});
  back.CopyFrom(dev);
  EXPECT_TRUE(back.Equals(host));
}

TEST(DeviceTest, ParsesDevices) {
  EXPECT_EQ(Device::Parse("cuda"), Device::Cuda(0));
  EXPECT_EQ(Device::Parse("cuda:3"), Device::Cuda(3));
  EXPECT_EQ(Device::Parse("cpu"), Device::Cpu());
  EXPECT_THAT([&] { Device::Parse("cuda:x"); }, ThrowsError(ErrorKind::kInvalidArgument));
  EXPECT_THAT([&] { Device::Parse("tpu"); }, ThrowsError(ErrorKind::kInvalidArgument));
  EXPECT_THAT([&] { Tensor::Empty(DType::kF32, {1}, Device::Cuda(CudaDeviceCount())); },
              ThrowsError(ErrorKind::kUnsupported, "CUDA device(s)"));
}

// Every bf16 and f16 bit pattern (NaNs, infinities, subnormals) and random
// f32 bits widen on the device exactly as the host's ConvertElements does.
TEST(DeviceTest, WideningOnTheDeviceMatchesTheHostBitForBit) {
  std::vector<std::pair<DType, DType>> pairs = {{DType::kBF16, DType::kF32},
                                                {DType::kF16, DType::kF32},
                                                {DType::kBF16, DType::kF64},
                                                {DType::kF16, DType::kF64},
                                                {DType::kF32, DType::kF64}};
  for (auto [src_dtype, dst_dtype] : pairs) {
    ASSERT_TRUE(DeviceConvertible(src_dtype, dst_dtype));
    const int64_t n = DTypeSize(src_dtype) == 2 ? 65536 : 1 << 20;
    Tensor src = Iota(src_dtype, n);
    if (n == 65536) {
      for (int64_t i = 0; i < n; ++i) src.data_as<uint16_t>()[i] = static_cast<uint16_t>(i);
    }
    Tensor expected = Tensor::Empty(dst_dtype, {n});
    ConvertElements(src.data(), src_dtype, expected.data(), dst_dtype, static_cast<size_t>(n));
    Tensor dev_src = src.To(Device::Cuda());
    Tensor dev_dst = Tensor::Empty(dst_dtype, {n}, Device::Cuda());
    ConvertOnDevice(dev_src.raw_data(), src_dtype, dev_dst.raw_data(), dst_dtype,
                    static_cast<size_t>(n), Device::Cuda());
    Tensor got = dev_dst.To(Device::Cpu());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.nbytes()), 0)
        << DTypeName(src_dtype) << " -> " << DTypeName(dst_dtype);
  }
  EXPECT_FALSE(DeviceConvertible(DType::kF32, DType::kBF16));  // narrowing: on the host
  EXPECT_THAT(
      [&] { ConvertOnDevice(nullptr, DType::kF32, nullptr, DType::kBF16, 0, Device::Cuda()); },
      ThrowsError(ErrorKind::kUnsupported));
}

TEST(DeviceTest, AsyncCopiesCompleteInOrder) {
  const size_t n = 8 << 20;
  bool pinned = false;
  std::shared_ptr<std::byte> host = AllocateHostStaging(n, &pinned);
  EXPECT_EQ(pinned, !CudaSimulated());
  Tensor a = Iota(DType::kU8, static_cast<int64_t>(n)).To(Device::Cuda());
  Tensor b = Iota(DType::kU8, static_cast<int64_t>(n) - 1).To(Device::Cuda());
  AsyncCopy copy(Device::Cuda());
  uint64_t first = copy.QueueToHost(host.get(), a.raw_data(), n);
  uint64_t second = copy.QueueToDevice(b.raw_data(), host.get(), n - 1);
  EXPECT_LT(first, second);
  copy.Wait(second);
  Tensor expected = a.To(Device::Cpu());
  EXPECT_EQ(std::memcmp(host.get(), expected.data(), n), 0);
  Tensor b_host = b.To(Device::Cpu());
  EXPECT_EQ(std::memcmp(b_host.data(), expected.data(), n - 1), 0);
}

}  // namespace
}  // namespace distckpt
