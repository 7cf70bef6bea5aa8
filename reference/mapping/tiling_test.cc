// Tests of the exact-tiling check: tilings, gaps (with the uncovered box
// found), overlaps, boxes outside the global box, empty and 0-d boxes.
#include "mapping/tiling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace distckpt {
namespace {

using testing::ElementsAre;
using testing::Pair;

// A (4, 6) box tiled by four boxes of different shapes.
std::vector<Box> Bricks() {
  return {Box{{0, 0}, {2, 3}}, Box{{0, 3}, {1, 3}}, Box{{1, 3}, {3, 3}}, Box{{2, 0}, {2, 3}}};
}

TEST(TilingTest, IrregularTilingIsExact) {
  const TilingCheck check = CheckTiling({4, 6}, Bricks(), 3);
  EXPECT_TRUE(check.ok());
  EXPECT_EQ(check.covered, 24);
}

TEST(TilingTest, GapIsLocated) {
  std::vector<Box> boxes = Bricks();
  boxes.erase(boxes.begin() + 2);
  const TilingCheck check = CheckTiling({4, 6}, boxes, 3);
  EXPECT_FALSE(check.ok());
  EXPECT_EQ(check.covered, 15);
  ASSERT_TRUE(check.gap.has_value());
  EXPECT_EQ(*check.gap, (Box{{1, 3}, {1, 3}}));
}

TEST(TilingTest, OverlapsArePaired) {
  std::vector<Box> boxes = Bricks();
  boxes.push_back(Box{{3, 5}, {1, 1}});  // inside brick 2
  const TilingCheck check = CheckTiling({4, 6}, boxes, 3);
  EXPECT_FALSE(check.ok());
  EXPECT_THAT(check.overlaps, ElementsAre(Pair(2, 4)));
  EXPECT_FALSE(check.gap.has_value());
}

TEST(TilingTest, OverlapExamplesAreCapped) {
  const std::vector<Box> boxes(10, Box{{0}, {4}});
  EXPECT_EQ(CheckTiling({4}, boxes, 3).overlaps.size(), 3u);
}

TEST(TilingTest, BoxesOutsideTheGlobalBox) {
  std::vector<Box> boxes = Bricks();
  boxes[3] = Box{{2, 0}, {3, 3}};  // one row past the end
  const TilingCheck check = CheckTiling({4, 6}, boxes, 3);
  EXPECT_THAT(check.outside, ElementsAre(3));
  EXPECT_TRUE(check.overlaps.empty());
  EXPECT_FALSE(check.gap.has_value());
  EXPECT_FALSE(check.ok());
}

TEST(TilingTest, EmptyBoxesAreIgnored) {
  std::vector<Box> boxes = Bricks();
  boxes.push_back(Box{{0, 0}, {0, 6}});
  boxes.push_back(Box{{9, 9}, {3, 0}});
  EXPECT_TRUE(CheckTiling({4, 6}, boxes, 3).ok());
  EXPECT_TRUE(CheckTiling({0, 6}, {}, 3).ok());
}

TEST(TilingTest, ScalarTensors) {
  const Box scalar{{}, {}};
  EXPECT_TRUE(CheckTiling({}, {scalar}, 3).ok());
  EXPECT_THAT(CheckTiling({}, {scalar, scalar}, 3).overlaps, ElementsAre(Pair(0, 1)));
  const TilingCheck none = CheckTiling({}, {}, 3);
  ASSERT_TRUE(none.gap.has_value());
  EXPECT_EQ(*none.gap, scalar);
}

TEST(TilingTest, ThreeDimensionalGap) {
  // A (2, 2, 2) cube missing its (1, 1, 1) corner.
  std::vector<Box> boxes = {Box{{0, 0, 0}, {1, 2, 2}}, Box{{1, 0, 0}, {1, 1, 2}},
                            Box{{1, 1, 0}, {1, 1, 1}}};
  const TilingCheck check = CheckTiling({2, 2, 2}, boxes, 3);
  EXPECT_EQ(check.covered, 7);
  ASSERT_TRUE(check.gap.has_value());
  EXPECT_EQ(*check.gap, (Box{{1, 1, 1}, {1, 1, 1}}));
}

}  // namespace
}  // namespace distckpt
