// Tests of Tensor: allocation, sharing, wrapping, reshaping and copies.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// An i32 tensor whose element i holds i.
Tensor Iota(Shape shape) {
  Tensor t = Tensor::Empty(DType::kI32, std::move(shape));
  std::iota(t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel(), 0);
  return t;
}

std::vector<int32_t> Values(const Tensor& t) {
  return {t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel()};
}

const auto kThrowsInvalidArgument = ThrowsError(ErrorKind::kInvalidArgument);

TEST(TensorTest, UndefinedTensor) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_TRUE(t.Equals(Tensor()));
  EXPECT_FALSE(t.Equals(Tensor::Zeros(DType::kF32, {})));
  EXPECT_FALSE(t.Clone().defined());
  EXPECT_THAT([&] { t.Reshape({1}); }, kThrowsInvalidArgument);
  EXPECT_THAT([&] { t.Slice(Box{}); }, kThrowsInvalidArgument);
}

TEST(TensorTest, EmptyIsAlignedAndZerosIsZero) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{3}, Shape{5, 7}, Shape{2, 0, 4}}) {
    for (DType dtype : kAllDTypes) {
      const Tensor t = Tensor::Zeros(dtype, shape);
      EXPECT_TRUE(t.defined());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
      EXPECT_EQ(t.dtype(), dtype);
      EXPECT_EQ(t.shape(), shape);
      EXPECT_EQ(t.ndim(), shape.size());
      EXPECT_EQ(t.numel(), Volume(shape));
      EXPECT_EQ(t.nbytes(), static_cast<size_t>(Volume(shape)) * DTypeSize(dtype));
      for (std::byte b : t.bytes()) ASSERT_EQ(b, std::byte{0});
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.At(i), 0.0);
    }
  }
  EXPECT_THAT([] { Tensor::Empty(DType::kF32, {3, -1}); }, kThrowsInvalidArgument);
}

// gcc defines __SANITIZE_*__ under -fsanitize; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DISTCKPT_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DISTCKPT_SANITIZER_ALLOCATOR 1
#endif
#endif

TEST(TensorTest, AnAllocationPastMemoryIsAnErrorNamingItsSize) {
#ifdef DISTCKPT_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "sanitizer allocators abort on a 1 PiB request instead of failing it";
#else
  // Before: std::bad_alloc, which the CLI printed as "error: std::bad_alloc".
  EXPECT_THAT([] { Tensor::Empty(DType::kU8, {int64_t{1} << 50}); },
              ThrowsError(ErrorKind::kIo,
                          "out of memory: cannot allocate 1125899906842624 bytes (1048576.0 GiB)"));
#endif
}

TEST(TensorTest, CopiesShareStorageAndCloneDoesNot) {
  Tensor t = Iota({2, 3});
  Tensor shared = t;
  const Tensor clone = t.Clone();
  EXPECT_EQ(shared.data(), t.data());
  EXPECT_NE(clone.data(), t.data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(clone.data()) % 64, 0u);
  EXPECT_TRUE(clone.Equals(t));
  t.data_as<int32_t>()[4] = 99;
  EXPECT_EQ(shared.At(4), 99.0);
  EXPECT_EQ(clone.At(4), 4.0);
  EXPECT_FALSE(clone.Equals(t));
}

TEST(TensorTest, WrapDoesNotOwn) {
  std::vector<float> buffer = {1.5f, -2.0f, 3.25f, 0.0f};
  {
    Tensor t = Tensor::Wrap(buffer.data(), DType::kF32, {2, 2});
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(static_cast<void*>(t.data()), buffer.data());
    EXPECT_EQ(t.At(2), 3.25);
    t.data_as<float>()[3] = 7.0f;
  }  // destroying the tensor must not free the vector's memory
  EXPECT_EQ(buffer[3], 7.0f);
  std::vector<float> none;
  EXPECT_TRUE(Tensor::Wrap(none.data(), DType::kF32, {0}).defined());
  EXPECT_THAT([] { Tensor::Wrap(nullptr, DType::kF32, {2}); }, kThrowsInvalidArgument);
}

TEST(TensorTest, ReshapeSharesStorageAndChecksVolume) {
  const Tensor t = Iota({2, 6});
  const Tensor r = t.Reshape({3, 2, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(Values(r), Values(t));
  EXPECT_EQ(t.shape(), (Shape{2, 6}));
  EXPECT_EQ(Tensor::Zeros(DType::kF32, {1, 1}).Reshape({}).shape(), Shape{});
  EXPECT_THAT([&] { t.Reshape({5}); },
              ThrowsError(ErrorKind::kInvalidArgument, "shape (2, 6) (12 elements) to (5,)"));
}

TEST(TensorTest, SliceCopiesSubBox) {
  const Tensor t = Iota({3, 4, 5});
  const Tensor s = t.Slice(Box{{1, 1, 2}, {2, 2, 3}});
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_NE(s.data(), t.data());
  EXPECT_EQ(Values(s), (std::vector<int32_t>{27, 28, 29, 32, 33, 34, 47, 48, 49, 52, 53, 54}));
  EXPECT_TRUE(t.Slice(Box{{0, 0, 0}, {3, 4, 5}}).Equals(t));
  EXPECT_EQ(t.Slice(Box{{1, 0, 0}, {0, 4, 5}}).numel(), 0);
  const Tensor scalar = Iota({});
  EXPECT_TRUE(scalar.Slice(Box{}).Equals(scalar));
  EXPECT_THAT([&] { t.Slice(Box{{0, 0, 1}, {3, 4, 5}}); }, kThrowsInvalidArgument);
  EXPECT_THAT([&] { t.Slice(Box{{0, 0}, {3, 4}}); }, kThrowsInvalidArgument);
}

TEST(TensorTest, FlatSliceCopiesRange) {
  const Tensor t = Iota({3, 4});
  const Tensor s = t.FlatSlice({5, 9});
  EXPECT_EQ(s.shape(), (Shape{4}));
  EXPECT_EQ(Values(s), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(t.FlatSlice({12, 12}).numel(), 0);
  EXPECT_THAT([&] { t.FlatSlice({10, 13}); }, kThrowsInvalidArgument);
  EXPECT_THAT([&] { t.FlatSlice({-1, 2}); }, kThrowsInvalidArgument);
  EXPECT_THAT([&] { t.FlatSlice({3, 2}); }, kThrowsInvalidArgument);
}

TEST(TensorTest, EqualsIsBitwise) {
  const Tensor t = Iota({4});
  EXPECT_TRUE(t.Equals(Iota({4})));
  EXPECT_FALSE(t.Equals(Iota({2, 2})));                     // shape
  EXPECT_FALSE(t.Equals(Tensor::Zeros(DType::kF32, {4})));  // dtype (and bytes)
  Tensor same_bytes = Iota({4});
  EXPECT_FALSE(t.Equals(Tensor::Wrap(same_bytes.data(), DType::kF32, {4})));  // dtype only
  // Bitwise: -0.0 differs from 0.0, and a NaN equals itself.
  float neg[] = {-0.0f, std::nanf("")};
  float pos[] = {0.0f, std::nanf("")};
  EXPECT_FALSE(Tensor::Wrap(neg, DType::kF32, {2}).Equals(Tensor::Wrap(pos, DType::kF32, {2})));
  const Tensor wrapped = Tensor::Wrap(neg, DType::kF32, {2});
  EXPECT_TRUE(wrapped.Equals(wrapped.Clone()));
}

}  // namespace
}  // namespace distckpt
