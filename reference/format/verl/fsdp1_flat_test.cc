// InferFsdp1Units / Fsdp1RankPieces: FSDP1's flat parameters as verl's
// checkpoints of fixtures/verl-runs hold them (root unit first, one per layer).
#include "format/verl/fsdp1_flat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// embed (66), layer 0 (a: 30, b: 6), layer 1 (a: 30, b: 6), norm (6), head (66).
const std::vector<std::string> kKeys = {
    "embed.weight",      "layers.0.a.weight", "layers.0.b.weight", "layers.1.a.weight",
    "layers.1.b.weight", "norm.weight",       "head.weight"};
const std::vector<int64_t> kNumels = {66, 30, 6, 30, 6, 6, 66};

TEST(Fsdp1FlatTest, InfersRootAndLayerUnitsFromShardSizes) {
  // 4 ranks: root 138 -> 35 per rank (2 padding), layers 36 -> 9.
  std::vector<Fsdp1Unit> u = InferFsdp1Units(kKeys, kNumels, {35, 9, 9}, 4, "t");
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].prefix, "");
  EXPECT_EQ(u[0].params, (std::vector<size_t>{0, 5, 6}));
  EXPECT_EQ(u[0].total, 138);
  EXPECT_EQ(u[1].prefix, "layers.0.");
  EXPECT_EQ(u[2].params, (std::vector<size_t>{3, 4}));
  // Root flat order: embed [0, 66), norm [66, 72), head [72, 138).
  // Rank 3 of the root: [105, 140) holds head [33, 66) at [0, 33), then padding.
  std::vector<Fsdp1Piece> p = Fsdp1RankPieces(u[0], kNumels, 4, 3);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].param, 6u);
  EXPECT_EQ(p[0].in_param, (FlatRange{33, 66}));
  EXPECT_EQ(p[0].in_shard, (FlatRange{0, 33}));
  // Rank 1 of the root: [35, 70) = embed [35, 66) and norm [0, 4).
  p = Fsdp1RankPieces(u[0], kNumels, 4, 1);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].in_param, (FlatRange{0, 4}));
  EXPECT_EQ(p[1].in_shard, (FlatRange{31, 35}));
}

TEST(Fsdp1FlatTest, RefusesShardSizesThatFitNoGroupingOrSeveral) {
  EXPECT_THAT(
      [&] {
        InferFsdp1Units(kKeys, kNumels, {35, 10, 9}, 4, "t");
      },
      ThrowsError(ErrorKind::kUnsupported, "fit no grouping"));
  // One nested unit of 8 among three equal subtrees: any of them fits.
  const std::vector<std::string> keys = {"x.0.w", "x.1.w", "x.2.w"};
  EXPECT_THAT(
      [&] {
        InferFsdp1Units(keys, {8, 8, 8}, {4, 2}, 4, "t");
      },
      ThrowsError(ErrorKind::kUnsupported, "more than one grouping"));
}

TEST(Fsdp1FlatTest, DefaultUnitsAreDecoderLayers) {
  std::vector<Fsdp1Unit> u = DefaultFsdp1Units(kKeys, kNumels);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].params, (std::vector<size_t>{0, 5, 6}));
  EXPECT_EQ(u[1].prefix, "layers.0.");
  EXPECT_EQ(u[2].total, 36);
}

}  // namespace
}  // namespace distckpt
