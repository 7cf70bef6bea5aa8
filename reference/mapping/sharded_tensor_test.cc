// Tests of ShardedTensor, ported from Megatron's test_mapping.py (#27-31,
// #33) with the same inputs and expected numbers, plus every integrity rule.
#include "mapping/sharded_tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mapping/testing.h"

namespace distckpt {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;
using testing::StartsWith;

ShardedTensor KeyA() {  // test_mapping's (1, 3, 7, 9) tensor, chunk (0, ., 3, .)
  return ShardedTensor::FromRankOffsets("keyA", Tensor::Zeros(DType::kF32, {1, 3, 7, 9}),
                                        {{0, 0, 10}, {2, 3, 6}});
}

TEST(ShardedTensorTest, FromRankOffsetsConstructor) {
  const ShardedTensor t = KeyA();
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.local_shape, (Shape{1, 3, 7, 9}));
  EXPECT_EQ(t.global_shape, (Shape{10, 3, 42, 9}));
  EXPECT_EQ(t.global_offset, (Shape{0, 0, 21, 0}));
  EXPECT_EQ(t.axis_fragmentations, (Shape{10, 1, 6, 1}));
  EXPECT_TRUE(t.has_regular_grid());
  EXPECT_EQ(t.LocalChunkOffsetInGlobal(), (Shape{0, 0, 3, 0}));
}

TEST(ShardedTensorTest, FromRankOffsetsFlatConstructor) {
  const Tensor full = Arange({1, 4, 7});
  const ShardedTensor t = ShardedTensor::FromRankOffsetsFlat(
      "keyA", full.FlatSlice({4, 9}), {1, 4, 7}, {{1, 0, 2}, {2, 3, 5}}, FlatRange{4, 9});
  EXPECT_EQ(t.local_shape, (Shape{1, 4, 7}));
  EXPECT_EQ(t.global_shape, (Shape{1, 8, 35}));
  EXPECT_EQ(t.global_offset, (Shape{0, 0, 21}));
  EXPECT_EQ(t.axis_fragmentations, (Shape{1, 2, 5}));
  EXPECT_EQ(t.flattened_range, (FlatRange{4, 9}));
  EXPECT_THAT(Values(t.data), ElementsAre(4, 5, 6, 7, 8));
  EXPECT_EQ(t.LocalNumel(), 5);
}

TEST(ShardedTensorTest, FromRankOffsetsMetaHasNoData) {
  const ShardedTensor t = ShardedTensor::FromRankOffsetsMeta("m", DType::kBF16, {3, 4},
                                                             {{0, 2, 5}, {2, 1, 2}}, {0, 1, 2}, 1);
  EXPECT_FALSE(t.data.defined());
  EXPECT_EQ(t.dtype, DType::kBF16);
  EXPECT_EQ(t.global_shape, (Shape{5, 3, 8}));
  EXPECT_EQ(t.global_offset, (Shape{2, 0, 4}));
  EXPECT_EQ(t.axis_fragmentations, (Shape{5, 1, 2}));
  EXPECT_EQ(t.GlobalBox(), (Box{{2, 0, 4}, {1, 3, 4}}));
  EXPECT_EQ(t.LocalChunkOffsetInGlobal(), (Shape{2, 0, 1}));
  EXPECT_EQ(t.LocalNumel(), 12);
  EXPECT_FALSE(IsMainReplica(t.replica_id));
}

TEST(ShardedTensorTest, InvalidRankOffsets) {
  const Tensor data = Tensor::Zeros(DType::kF32, {2, 3});
  for (const RankOffset& bad : {RankOffset{0, 2, 2}, RankOffset{-1, 0, 2}, RankOffset{0, -1, 2},
                                RankOffset{0, 0, 0}, RankOffset{2, 0, 2}}) {
    const std::string message = ErrorMessage(ErrorKind::kInvalidSharding, [&] {
      ShardedTensor::FromRankOffsets("keyA", data, {{1, 0, 1}, bad});
    });
    EXPECT_EQ(message, fmt::format("Invalid rank offsets: ((1, 0, 1), ({}, {}, {})) for key keyA.",
                                   bad.axis, bad.rank_offset, bad.fragments));
  }
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidSharding,
                         [&] {
                           ShardedTensor::FromRankOffsets("k", data, {{0, 3, 3}});
                         }),
            "Invalid rank offsets: ((0, 3, 3),) for key k.");
}

// test_metadata_integrity_violation (#29), then every remaining rule.
TEST(ShardedTensorTest, MetadataIntegrityViolation) {
  ShardedTensor t = KeyA();
  t.local_shape = {1, 2, 7, 9};
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith("Data shape should match `local_shape` attribute for ShardedTensor(key='keyA'"));

  t = KeyA();
  t.global_offset = {0, 1, 0};
  EXPECT_THAT(ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
              StartsWith("Global offset dimensions should be equal to global shape dimensions for "
                         "ShardedTensor(key='keyA'"));

  const Tensor data = Tensor::Zeros(DType::kF32, {1, 3, 7, 9});
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidSharding,
                         [&] {
                           ShardedTensor::FromRankOffsetsFlat("keyA", data, data.shape(),
                                                              {{0, 0, 10}, {2, 3, 6}},
                                                              FlatRange{4, 9});
                         }),
            "Flattened ShardedTensor requires 1D data, got shape: (1, 3, 7, 9)");

  t = ShardedTensor::FromRankOffsetsFlat("keyA", data.Reshape({189}).FlatSlice({4, 9}),
                                         data.shape(), {{0, 0, 10}, {2, 3, 6}}, FlatRange{4, 9});
  EXPECT_EQ(t.local_shape, (Shape{1, 3, 7, 9}));
  t.local_shape = {5};
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith("Data shape (5,) doesnt match expected (1,) for ShardedTensor(key='keyA'"));
}

TEST(ShardedTensorTest, RemainingIntegrityRules) {
  ShardedTensor t = KeyA();
  t.dtype = DType::kBF16;
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith(
          "Data dtype should match `dtype` attribute for ShardedTensor(key='keyA', dtype=bf16"));

  t = KeyA();
  t.flattened_range = FlatRange{0, 189};
  EXPECT_THAT(ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
              StartsWith("Data should be 1D for a flattened ShardedTensor"));

  t = KeyA().WithoutData();
  t.prepend_axis_num = 1;
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith("Local shape together with `prepend_axis_num` dimensions should be equal to "
                 "global shape dimensions for"));

  t = KeyA().WithoutData();
  t.global_offset = {0, 0, 20, 0};
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith("Global offset (20) must be divisible by local shape (7) for ShardedTensor"));
  t.axis_fragmentations.reset();  // uneven sharding: any offset is fine
  EXPECT_NO_THROW(t.ValidateMetadataIntegrity());

  t.flattened_range = FlatRange{100, 200};  // past the 189 elements of the chunk
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.ValidateMetadataIntegrity(); }),
      StartsWith(
          "Flattened range slice(100, 200, None) is out of bounds of local shape (1, 3, 7, 9)"));

  EXPECT_EQ(ErrorMessage(
                ErrorKind::kInvalidSharding,
                [&] {
                  ShardedTensor::FromRankOffsetsFlat("k", Arange({4}), {2, 3}, {}, FlatRange{0, 5});
                }),
            "Flattened ShardedTensor data length (4) must meet the slice length: 5");
}

TEST(ShardedTensorTest, Narrowing) {
  const ShardedTensor t = KeyA();
  std::vector<ShardedTensor> narrowed = t.Narrow(1, 1, 2);
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_EQ(narrowed[0].local_shape, (Shape{1, 2, 7, 9}));
  EXPECT_EQ(narrowed[0].global_shape, (Shape{10, 2, 42, 9}));
  EXPECT_EQ(narrowed[0].global_offset, (Shape{0, 0, 21, 0}));
  EXPECT_EQ(narrowed[0].data.shape(), (Shape{1, 2, 7, 9}));

  narrowed = t.Narrow(2, 3, 2);
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_EQ(narrowed[0].local_shape, (Shape{1, 3, 2, 9}));
  EXPECT_EQ(narrowed[0].global_shape, (Shape{10, 3, 12, 9}));
  EXPECT_EQ(narrowed[0].global_offset, (Shape{0, 0, 6, 0}));
}

TEST(ShardedTensorTest, NarrowingCopiesTheSelectedData) {
  const ShardedTensor t = ShardedTensor::FromRankOffsets("k", Arange({2, 3}), {{1, 1, 2}});
  const std::vector<ShardedTensor> narrowed = t.Narrow(1, 1, 2);
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_THAT(Values(narrowed[0].data), ElementsAre(1, 2, 4, 5));
  EXPECT_NO_THROW(narrowed[0].ValidateMetadataIntegrity());
}

TEST(ShardedTensorTest, FlatNarrow) {
  const ShardedTensor t = ShardedTensor::FromRankOffsetsFlat(
      "keyA", Arange({28}).FlatSlice({4, 9}), {4, 7}, {{0, 1, 2}, {1, 3, 5}}, FlatRange{4, 9});

  std::vector<ShardedTensor> narrowed = t.Narrow(0, 0, 1);
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_THAT(Values(narrowed[0].data), ElementsAre(4, 5, 6));
  EXPECT_EQ(narrowed[0].local_shape, (Shape{1, 7}));
  EXPECT_EQ(narrowed[0].global_shape, (Shape{2, 35}));
  EXPECT_EQ(narrowed[0].global_offset, (Shape{1, 21}));
  EXPECT_EQ(narrowed[0].flattened_range, (FlatRange{4, 7}));

  narrowed = t.Narrow(0, 0, 3);
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_THAT(Values(narrowed[0].data), ElementsAre(4, 5, 6, 7, 8));
  EXPECT_EQ(narrowed[0].local_shape, (Shape{3, 7}));
  EXPECT_EQ(narrowed[0].global_shape, (Shape{6, 35}));
  EXPECT_EQ(narrowed[0].global_offset, (Shape{3, 21}));

  EXPECT_TRUE(t.Narrow(0, 2, 1).empty());

  narrowed = t.Narrow(0, 1, 2);  // rows 1-2 hold flat elements 7..20: 7 and 8 are here
  ASSERT_EQ(narrowed.size(), 1u);
  EXPECT_THAT(Values(narrowed[0].data), ElementsAre(7, 8));
  EXPECT_EQ(narrowed[0].flattened_range, (FlatRange{0, 2}));

  EXPECT_EQ(ErrorMessage(ErrorKind::kUnsupported, [&] { t.Narrow(1, 0, 1); }),
            "Narrowing along the first axis is supported for now only, got dim=1");
}

TEST(ShardedTensorTest, NarrowRequiresARegularGridOnTheAxis) {
  ShardedTensor t = ShardedTensor::FromRankOffsets("k", Arange({3, 2}), {});
  t.global_shape = {7, 2};
  t.axis_fragmentations.reset();
  EXPECT_THAT(
      ErrorMessage(ErrorKind::kInvalidSharding, [&] { t.Narrow(0, 0, 1); }),
      StartsWith(
          "Only regular grid of local tensors is supported for narrowing, got: ShardedTensor"));
}

TEST(ShardedTensorTest, IsMainReplica) {
  EXPECT_TRUE(IsMainReplica({0}));
  EXPECT_TRUE(IsMainReplica({0, 0}));
  EXPECT_TRUE(IsMainReplica({0, 0, 0}));
  EXPECT_FALSE(IsMainReplica({1}));
  EXPECT_FALSE(IsMainReplica({2}));
  EXPECT_FALSE(IsMainReplica({1, 0}));
  EXPECT_FALSE(IsMainReplica({1, 1, 1}));
  EXPECT_EQ(ReplicaIdToString({0}), "0");
  EXPECT_EQ(ReplicaIdToString({0, 1, 2}), "(0, 1, 2)");
}

TEST(ShardedTensorTest, ReprFollowsMegatron) {
  EXPECT_EQ(
      KeyA().ToString(),
      "ShardedTensor(key='keyA', dtype=f32, local_shape=(1, 3, 7, 9), global_shape=(10, 3, 42, 9), "
      "global_offset=(0, 0, 21, 0), axis_fragmentations=(10, 1, 6, 1), replica_id=0, "
      "prepend_axis_num=0, allow_shape_mismatch=False, flattened_range=None)");
  ShardedTensor t = ShardedTensor::FromRankOffsetsFlat("flat", Arange({3}), {6}, {},
                                                       FlatRange{1, 4}, {0, 0, 1}, 0, true);
  t.axis_fragmentations.reset();
  EXPECT_EQ(t.ToString(),
            "ShardedTensor(key='flat', dtype=i64, local_shape=(6,), global_shape=(6,), "
            "global_offset=(0,), "
            "axis_fragmentations=None, replica_id=(0, 0, 1), prepend_axis_num=0, "
            "allow_shape_mismatch=True, flattened_range=slice(1, 4, None))");
}

TEST(ShardedTensorTest, WithoutDataKeepsMetadata) {
  const ShardedTensor t = KeyA();
  const ShardedTensor m = t.WithoutData();
  EXPECT_TRUE(t.data.defined());
  EXPECT_FALSE(m.data.defined());
  EXPECT_EQ(m.ToString(), t.ToString());
}

}  // namespace
}  // namespace distckpt
