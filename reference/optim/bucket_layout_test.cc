#include "optim/bucket_layout.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

TEST(BucketLayoutTest, PadsParamStartsTo64AndBucketEndToLcm) {
  // 10 elements at 0, 100 at 64, 3 at 192: unpadded 195; lcm(4, 128) = 128 -> 256.
  BufferLayout l = LayoutBuffer({10, 100, 3}, 4, 128, 0);
  EXPECT_EQ(l.params, (std::vector<FlatRange>{{0, 10}, {64, 164}, {192, 195}}));
  ASSERT_EQ(l.buckets.size(), 1u);
  EXPECT_EQ(l.buckets[0].numel_unpadded, 195);
  EXPECT_EQ(l.buckets[0].numel, 256);
  EXPECT_EQ(DpSlice(l.buckets[0], 4, 3), (FlatRange{192, 256}));
}

TEST(BucketLayoutTest, UnpaddedNumelDoesNotDependOnDpOrDivisor) {
  for (int64_t dp : {1, 2, 3, 8}) {
    for (int64_t pad : {8, 40, 44, 56, 128}) {
      BufferLayout l = LayoutBuffer({10, 100, 3}, dp, pad, 0);
      EXPECT_EQ(l.buckets[0].numel_unpadded, 195);
      EXPECT_EQ(l.buckets[0].numel % dp, 0);
      EXPECT_EQ(l.buckets[0].numel % pad, 0);
    }
  }
}

TEST(BucketLayoutTest, ClosesBucketsAtBucketNumel) {
  BufferLayout l = LayoutBuffer({10, 100, 3}, 2, 8, 100);
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.buckets[0].numel_unpadded, 164);
  EXPECT_EQ(l.buckets[0].numel, 168);
  EXPECT_EQ(l.buckets[1].start, 168);
  EXPECT_EQ(l.params[2], (FlatRange{168, 171}));
  EXPECT_EQ(l.buckets[1].numel_unpadded, 3);
}

TEST(BucketLayoutTest, SegmentsCutAtParamsAndGapsAndTileTheUnpaddedBucket) {
  BufferLayout l = LayoutBuffer({10, 100, 3}, 4, 128, 0);
  const Bucket& b = l.buckets[0];
  EXPECT_EQ(BucketSegments(l, b, 4, 0), (std::vector<FlatRange>{{0, 10}, {10, 64}}));
  EXPECT_EQ(BucketSegments(l, b, 4, 2), (std::vector<FlatRange>{{128, 164}, {164, 192}}));
  EXPECT_EQ(BucketSegments(l, b, 4, 3), (std::vector<FlatRange>{{192, 195}}));
  int64_t covered = 0;
  for (int64_t r = 0; r < 4; ++r) {
    for (const FlatRange& s : BucketSegments(l, b, 4, r)) {
      EXPECT_EQ(s.start, covered);
      covered = s.stop;
    }
  }
  EXPECT_EQ(covered, b.numel_unpadded);
}

TEST(BucketLayoutTest, AllPaddingSliceHasNoSegments) {
  BufferLayout l = LayoutBuffer({3}, 4, 128, 0);
  EXPECT_TRUE(BucketSegments(l, l.buckets[0], 4, 1).empty());
}

TEST(BucketLayoutTest, RefusesBadDp) {
  EXPECT_THAT([] { LayoutBuffer({1}, 0, 128, 0); },
              ThrowsError(ErrorKind::kInvalidArgument, "dp >= 1"));
}

}  // namespace
}  // namespace distckpt
