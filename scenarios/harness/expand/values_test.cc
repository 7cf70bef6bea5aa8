#include "harness/expand/values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace distckpt {
namespace {

TEST(ValuesTest, EveryDtypeValueIsExactlyRepresentable) {
  for (DType dtype : kAllDTypes) {
    if (!IsFloatingPoint(dtype)) continue;
    for (int64_t i = 0; i < 2000; ++i) {
      std::byte a[8], b[8];
      GenerateElement(3, KeyHash("k"), i, dtype, a);
      double v = LoadAsDouble(a, dtype, 0);
      ASSERT_TRUE(std::isfinite(v)) << DTypeName(dtype) << " index " << i;
      StoreFromDouble(b, dtype, 0, v);
      ASSERT_EQ(std::memcmp(a, b, DTypeSize(dtype)), 0) << DTypeName(dtype) << " index " << i;
    }
  }
}

TEST(ValuesTest, DependsOnSeedKeyAndIndex) {
  auto value = [](uint64_t seed, const std::string& key, int64_t i) {
    float f;
    GenerateElement(seed, KeyHash(key), i, DType::kF32, reinterpret_cast<std::byte*>(&f));
    return f;
  };
  int same_index = 0, same_key = 0, same_seed = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    same_index += value(1, "a", i) == value(1, "a", i + 1);
    same_key += value(1, "a", i) == value(1, "b", i);
    same_seed += value(1, "a", i) == value(2, "a", i);
    ASSERT_EQ(value(1, "a", i), value(1, "a", i));
  }
  // 2^20 distinct values: a handful of collisions at most.
  EXPECT_LT(same_index, 5);
  EXPECT_LT(same_key, 5);
  EXPECT_LT(same_seed, 5);
}

TEST(ValuesTest, CheckShardFindsASingleWrongElementAndItsPosition) {
  ShardLocation where{{4, 6}, Box{{2, 0}, {2, 6}}, std::nullopt};
  Tensor t = Tensor::Empty(DType::kF32, {2, 6});
  FillShard(9, "w", where, t);
  EXPECT_FALSE(CheckShard(9, "w", DType::kF32, where, t));
  t.data_as<float>()[7] += 1;  // local (1, 1) = global (3, 1)
  auto bad = CheckShard(9, "w", DType::kF32, where, t);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->position, (Shape{3, 1}));
  EXPECT_EQ(bad->global_index, 19);
  EXPECT_EQ(bad->count, 1);
  EXPECT_TRUE(CheckShard(10, "w", DType::kF32, where, t));  // another seed differs everywhere
}

TEST(ValuesTest, PaddingRowsAreZeroAndFlatRangesAreOffsets) {
  // Logical 3 rows, padded box of 4 rows: row 3 is padding.
  ShardLocation where{{3, 2}, Box{{2, 0}, {2, 2}}, FlatRange{1, 4}};
  Tensor t = Tensor::Empty(DType::kBF16, {3});
  FillShard(1, "e", where, t);
  EXPECT_EQ(t.At(2), 0);  // element 3 of the box = global (3, 1): padding
  Tensor full = Tensor::Empty(DType::kBF16, {3, 2});
  FillShard(1, "e", ShardLocation{{3, 2}, Box{{0, 0}, {3, 2}}, std::nullopt}, full);
  EXPECT_EQ(t.At(0), full.At(5));  // box element 1 = global (2, 1)
  EXPECT_FALSE(CheckShard(1, "e", DType::kBF16, where, t));
}

TEST(ValuesTest, ConvertedLoadsAreCheckedAgainstConvertedValues) {
  ShardLocation where{{64}, Box{{0}, {64}}, std::nullopt};
  Tensor f32 = Tensor::Empty(DType::kF32, {64});
  FillShard(5, "m", where, f32);
  Tensor bf16 = Tensor::Empty(DType::kBF16, {64});
  ConvertElements(f32.data(), DType::kF32, bf16.data(), DType::kBF16, 64);
  EXPECT_FALSE(CheckShard(5, "m", DType::kF32, where, bf16));
  EXPECT_TRUE(CheckShard(5, "m", DType::kBF16, where, bf16));  // wrong stored dtype
}

}  // namespace
}  // namespace distckpt
