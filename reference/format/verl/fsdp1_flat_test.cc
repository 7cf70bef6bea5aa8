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

// use_orig_params=True, fp32 (16-byte alignment = 4 elements), 3 ranks, as
// fixtures/verl-runs/fsdp1-orig-w3 holds it: root embed [0, 66), norm [68, 74),
// head [76, 142), padded to 144: 48 per rank.
TEST(Fsdp1FlatTest, AlignedLayoutOfUseOrigParams) {
  std::vector<Fsdp1Unit> u = DefaultFsdp1Units(kKeys, kNumels);
  SetFsdp1Align(u[0], kNumels, 4);
  EXPECT_EQ(u[0].total, 142);
  std::vector<Fsdp1Piece> p = Fsdp1RankPieces(u[0], kNumels, 3, 1);  // [48, 96)
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].in_param, (FlatRange{48, 66}));
  EXPECT_EQ(p[1].in_param, (FlatRange{0, 6}));
  EXPECT_EQ(p[1].in_shard, (FlatRange{20, 26}));
  EXPECT_EQ(p[2].in_param, (FlatRange{0, 20}));
  EXPECT_EQ(p[2].in_shard, (FlatRange{28, 48}));
}

TEST(Fsdp1FlatTest, InfersOrigParamsUnitsAndAlignmentFromPieceSizes) {
  // Rank 1 of 3: root pieces 18 / 6 / 20; layers (a [0, 30), b [32, 38):
  // 13 per rank) hold a [13, 26) and none of b.
  std::vector<Fsdp1Unit> u =
      InferFsdp1OrigUnits(kKeys, kNumels, {{1, {18, 13, 0, 13, 0, 6, 20}}}, 3, "t");
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].align, 4);
  EXPECT_EQ(u[0].params, (std::vector<size_t>{0, 5, 6}));
  // bf16 alignment (8): root embed [0, 66), norm [72, 78), head [80, 146) -> 49
  // per rank; rank 1 [49, 98): 17 / 6 / 18.
  u = InferFsdp1OrigUnits(kKeys, kNumels, {{1, {17, 13, 0, 13, 0, 6, 18}}}, 3, "t");
  EXPECT_EQ(u[0].align, 8);
  EXPECT_EQ(u[1].total, 38);
  // Sizes no alignment gives.
  EXPECT_THAT(
      [&] {
        InferFsdp1OrigUnits(kKeys, kNumels, {{1, {19, 13, 0, 13, 0, 6, 20}}}, 3, "t");
      },
      ThrowsError(ErrorKind::kUnsupported, "fit no grouping"));
  // Rank 2 alone fits alignment 4 (root [96, 144): head 46; layers a 4, b 6)
  // and 2 (root [92, 138): head 46; layers [24, 36): a 6, b 6) only where the
  // layers say apart; with the head alone in the root both fit: ambiguous,
  // until rank 0's pieces decide.
  const std::vector<std::string> keys = {"embed.weight", "head.weight"};
  const std::map<int64_t, std::vector<int64_t>> rank2 = {{2, {0, 46}}};
  bool ambiguous = false;
  EXPECT_TRUE(InferFsdp1OrigUnits(keys, {66, 72}, rank2, 3, "t", &ambiguous).empty());
  EXPECT_TRUE(ambiguous);
  EXPECT_THAT(
      [&] {
        InferFsdp1OrigUnits(keys, {66, 72}, rank2, 3, "t");
      },
      ThrowsError(ErrorKind::kUnsupported, "more than one layout"));
  u = InferFsdp1OrigUnits(keys, {66, 72}, {{2, {0, 46}}, {0, {46, 0}}}, 3, "t", &ambiguous);
  EXPECT_FALSE(ambiguous);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].align, 2);
}

}  // namespace
}  // namespace distckpt
