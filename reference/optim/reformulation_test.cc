#include "optim/reformulation.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// test_reformulate_nd_flattened_tensors: global (8, 5, 40), TP on axis 0, PP
// on axis 2, order tp-dp-pp; save TP2/PP4, load TP2/PP2.
TEST(ReformulationTest, Tp2Pp4ToTp2Pp2) {
  Shape global{8, 5, 40}, ckpt{2, 1, 4}, app{2, 1, 2};
  // (rank: tp, pp) 0:(0,0) 1:(1,0) 4:(0,1) 5:(1,1); ranks 2,3,6,7 are their DP peers.
  EXPECT_EQ(ReformulatedChunkOffsets(global, ckpt, app, {0, 0, 0}),
            (std::vector<Shape>{{0, 0, 0}, {0, 0, 10}}));
  EXPECT_EQ(ReformulatedChunkOffsets(global, ckpt, app, {1, 0, 0}),
            (std::vector<Shape>{{4, 0, 0}, {4, 0, 10}}));
  EXPECT_EQ(ReformulatedChunkOffsets(global, ckpt, app, {0, 0, 1}),
            (std::vector<Shape>{{0, 0, 20}, {0, 0, 30}}));
  EXPECT_EQ(ReformulatedChunkOffsets(global, ckpt, app, {1, 0, 1}),
            (std::vector<Shape>{{4, 0, 20}, {4, 0, 30}}));
}

TEST(ReformulationTest, Tp8Pp1ToTp1Pp2EveryRankReadsEveryTpChunk) {
  std::vector<Shape> expected;
  for (int64_t tp = 0; tp < 8; ++tp) expected.push_back({tp, 0, 0});
  for (int64_t pp = 0; pp < 2; ++pp) {
    EXPECT_EQ(ReformulatedChunkOffsets({8, 5, 40}, {8, 1, 1}, {1, 1, 2}, {0, 0, pp}), expected);
  }
}

TEST(ReformulationTest, SameGridReadsItsOwnChunk) {
  EXPECT_EQ(ReformulatedChunkOffsets({6, 4}, {3, 2}, {3, 2}, {2, 1}), (std::vector<Shape>{{4, 2}}));
}

TEST(ReformulationTest, RefusesIndivisibleCheckpointShape) {
  EXPECT_THAT(
      [] {
        ReformulatedChunkOffsets({7, 4}, {2, 1}, {1, 1}, {0, 0});
      },
      ThrowsError(ErrorKind::kInvalidArgument, "axis 0 of size 7"));
  EXPECT_THAT(
      [] {
        ReformulatedChunkOffsets({8}, {2, 1}, {1}, {0});
      },
      ThrowsError(ErrorKind::kInvalidArgument));
}

}  // namespace
}  // namespace distckpt
