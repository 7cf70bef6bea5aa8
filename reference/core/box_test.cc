// Tests of the box algebra and run enumeration: hand-computed cases, edge
// shapes, and a randomized cross-check against a per-element reference.
#include "core/box.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "core/error_testing.h"

namespace distckpt {
namespace {

using Runs = std::vector<ByteRun>;
using CopyRuns = std::vector<CopyRun>;

CopyRuns CollectCopyRuns(const Box& a, const std::optional<FlatRange>& a_flat, const Box& b,
                         const std::optional<FlatRange>& b_flat, const Box& region) {
  CopyRuns runs;
  ForEachCopyRun(a, a_flat, b, b_flat, region, [&](const CopyRun& run) { runs.push_back(run); });
  return runs;
}

const auto kThrowsInvalidArgument = ThrowsError(ErrorKind::kInvalidArgument);

TEST(BoxTest, VolumeAndStrings) {
  EXPECT_EQ(Volume({}), 1);
  EXPECT_EQ(Volume({4}), 4);
  EXPECT_EQ(Volume({2, 3, 7}), 42);
  EXPECT_EQ(Volume({5, 0, 3}), 0);
  EXPECT_THAT([] { Volume({2, -1}); }, kThrowsInvalidArgument);
  EXPECT_THAT([] { Volume({int64_t{1} << 40, int64_t{1} << 40}); }, kThrowsInvalidArgument);
  EXPECT_EQ(ShapeToString({}), "()");
  EXPECT_EQ(ShapeToString({4}), "(4,)");
  EXPECT_EQ(ShapeToString({2, 3}), "(2, 3)");
  EXPECT_EQ((Box{{0, 4}, {2, 4}}).ToString(), "[0:2, 4:8]");
  EXPECT_EQ(Box{}.ToString(), "[]");
  EXPECT_TRUE((Box{{3}, {0}}).empty());
  EXPECT_FALSE(Box{}.empty());  // 0-d: one element
}

TEST(BoxTest, IntersectAndContains) {
  const Box a{{0, 0}, {4, 6}};
  const Box b{{2, 3}, {5, 5}};
  EXPECT_EQ(Intersect(a, b), (Box{{2, 3}, {2, 3}}));
  EXPECT_EQ(Intersect(b, a), (Box{{2, 3}, {2, 3}}));
  EXPECT_EQ(Intersect(a, Box{{4, 0}, {1, 6}}), std::nullopt);  // touching, no overlap
  EXPECT_EQ(Intersect(a, Box{{1, 1}, {0, 2}}), std::nullopt);  // empty
  EXPECT_EQ(Intersect(Box{}, Box{}), Box{});                   // 0-d boxes overlap
  EXPECT_TRUE(Contains(a, Box{{1, 2}, {3, 4}}));
  EXPECT_TRUE(Contains(a, a));
  EXPECT_FALSE(Contains(a, b));
  EXPECT_FALSE(Contains(a, Box{{-1, 0}, {1, 1}}));
  EXPECT_TRUE(Contains(a, Box{{100, 100}, {0, 3}}));  // empty inner box
  EXPECT_TRUE(Contains(Box{}, Box{}));
  EXPECT_THAT([&] { Intersect(a, Box{{0}, {4}}); }, kThrowsInvalidArgument);
  EXPECT_THAT([&] { Contains(a, Box{{0}, {4, 6}}); }, kThrowsInvalidArgument);
}

// InsideShape is Contains(Box{zeros, shape}, box) without the box: the same
// verdict on boxes in, across, outside and far outside a shape, empty ones,
// and other ranks (false, where Contains throws).
TEST(BoxTest, InsideShapeAgreesWithContains) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::mt19937 rng(5);
  const std::vector<int64_t> values = {-3, -1, 0, 1, 2, 3, 5, 8, kMax - 1, kMax};
  auto pick = [&] {
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
  };
  int inside = 0, outside = 0, empty = 0;
  for (int i = 0; i < 5000; ++i) {
    const size_t rank = std::uniform_int_distribution<size_t>(0, 3)(rng);
    Shape shape(rank), offset(rank), extent(rank);
    for (size_t a = 0; a < rank; ++a) {
      shape[a] = std::uniform_int_distribution<int64_t>(0, 8)(rng);
      offset[a] = pick();
      extent[a] = std::uniform_int_distribution<int64_t>(0, 1)(rng) ? pick() % 9 : shape[a];
      if (extent[a] < 0) extent[a] = -extent[a];
    }
    const Box box{offset, extent};
    const bool verdict = Contains(Box{Shape(rank, 0), shape}, box);
    EXPECT_EQ(InsideShape(box, shape), verdict) << box.ToString() << " in " << ShapeToString(shape);
    (verdict ? inside : outside) += 1;
    empty += box.empty() && rank > 0;
  }
  EXPECT_GE(inside, 500);
  EXPECT_GE(outside, 500);
  EXPECT_GE(empty, 100);
  EXPECT_FALSE(InsideShape(Box{{0}, {2}}, Shape{2, 2}));
  EXPECT_FALSE(InsideShape(Box{{0, 0}, {2}}, Shape{2}));
}

// Issue 15 defect 6: a chunk offset near INT64_MAX (from a damaged file)
// overflowed in Box::ToString, Contains and Intersect.
TEST(BoxTest, OffsetsNearInt64MaxDoNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const Box far{{kMax - 1}, {5}};
  EXPECT_EQ(far.ToString(), fmt::format("[{}:{}+5]", kMax - 1, kMax - 1));
  EXPECT_FALSE(Contains(Box{{0}, {10}}, far));
  EXPECT_FALSE(Contains(Box{{0}, {kMax}}, far));
  EXPECT_EQ(Intersect(Box{{0}, {10}}, far), std::nullopt);
  EXPECT_EQ(Intersect(Box{{kMax - 3}, {3}}, far), (Box{{kMax - 1}, {1}}));
}

TEST(BoxTest, SubBoxRunsHandComputed) {
  const Box chunk{{10, 20}, {4, 6}};  // rows of 6 elements
  // Columns 22..24 of rows 11..12: two runs of 3 elements of 4 bytes.
  EXPECT_EQ(SubBoxRuns(chunk, Box{{11, 22}, {2, 3}}, 4),
            (Runs{{(6 + 2) * 4, 12}, {(12 + 2) * 4, 12}}));
  // Full rows 11..12 merge into one run.
  EXPECT_EQ(SubBoxRuns(chunk, Box{{11, 20}, {2, 6}}, 2), (Runs{{12, 24}}));
  EXPECT_EQ(SubBoxRuns(chunk, chunk, 8), (Runs{{0, 4 * 6 * 8}}));
  // A single column: one element per row.
  EXPECT_EQ(SubBoxRuns(chunk, Box{{10, 25}, {4, 1}}, 1), (Runs{{5, 1}, {11, 1}, {17, 1}, {23, 1}}));
  // 3-d: full on the last two axes merges them, and a partial middle axis does not.
  const Box cube{{0, 0, 0}, {3, 5, 7}};
  EXPECT_EQ(SubBoxRuns(cube, Box{{1, 0, 0}, {2, 5, 7}}, 1), (Runs{{35, 70}}));
  EXPECT_EQ(SubBoxRuns(cube, Box{{0, 1, 0}, {3, 2, 7}}, 1), (Runs{{7, 14}, {42, 14}, {77, 14}}));
  EXPECT_EQ(SubBoxRuns(cube, Box{{2, 4, 6}, {1, 1, 1}}, 1), (Runs{{104, 1}}));
  EXPECT_EQ(SubBoxRuns(Box{}, Box{}, 4), (Runs{{0, 4}}));  // 0-d: one element
  EXPECT_EQ(SubBoxRuns(chunk, Box{{11, 22}, {0, 3}}, 4), Runs{});
  EXPECT_THAT([&] { SubBoxRuns(chunk, Box{{9, 20}, {2, 2}}, 4); }, kThrowsInvalidArgument);
}

TEST(BoxTest, CopyRunsHandComputed) {
  // a holds rows 0..3 x cols 0..5, b rows 2..5 x cols 2..3; region = overlap.
  const Box a{{0, 0}, {4, 6}};
  const Box b{{2, 2}, {4, 2}};
  const Box region{{2, 2}, {2, 2}};
  EXPECT_EQ(CollectCopyRuns(a, std::nullopt, b, std::nullopt, region),
            (CopyRuns{{14, 0, 2}, {20, 2, 2}}));
  // Full rows in both layouts: one run.
  EXPECT_EQ(CollectCopyRuns(Box{{0, 0}, {4, 6}}, std::nullopt, Box{{1, 0}, {2, 6}}, std::nullopt,
                            Box{{1, 0}, {2, 6}}),
            (CopyRuns{{6, 0, 12}}));
  // b's flat window [1, 3) of its 8 elements holds (2,3) and (3,2): runs are
  // clipped to it and b's indices are relative to its start.
  EXPECT_EQ(CollectCopyRuns(a, std::nullopt, b, FlatRange{1, 3}, region),
            (CopyRuns{{15, 0, 1}, {20, 1, 1}}));
  // a's window [15, 21): rows 2 (cols 3..5) and 3 (cols 0..2).
  EXPECT_EQ(CollectCopyRuns(a, FlatRange{15, 21}, b, std::nullopt, region),
            (CopyRuns{{0, 1, 1}, {5, 2, 1}}));
  EXPECT_EQ(CollectCopyRuns(a, FlatRange{0, 14}, b, std::nullopt, region), CopyRuns{});
  EXPECT_EQ(CollectCopyRuns(Box{}, FlatRange{0, 1}, Box{}, std::nullopt, Box{}),
            (CopyRuns{{0, 0, 1}}));
  EXPECT_THAT(
      [&] {
        CollectCopyRuns(a, FlatRange{3, 25}, b, std::nullopt, region);
      },
      kThrowsInvalidArgument);
  EXPECT_THAT(
      [&] {
        CollectCopyRuns(a, FlatRange{3, 2}, b, std::nullopt, region);
      },
      kThrowsInvalidArgument);
  const Box outside_b{{1, 2}, {2, 2}};
  EXPECT_THAT([&] { CollectCopyRuns(a, std::nullopt, b, std::nullopt, outside_b); },
              kThrowsInvalidArgument);
}

// Per-element reference: walk the region in row-major order, keep elements
// inside both flat windows, and merge neighbours that are adjacent on both sides.
int64_t LinearIndex(const Box& box, const std::vector<int64_t>& point) {
  int64_t index = 0;
  for (size_t axis = 0; axis < box.rank(); ++axis) {
    index = index * box.shape[axis] + (point[axis] - box.offset[axis]);
  }
  return index;
}

CopyRuns ReferenceCopyRuns(const Box& a, const std::optional<FlatRange>& a_flat, const Box& b,
                           const std::optional<FlatRange>& b_flat, const Box& region) {
  CopyRuns runs;
  std::vector<int64_t> point(region.offset);
  for (int64_t n = 0; n < region.volume(); ++n) {
    int64_t ai = LinearIndex(a, point);
    int64_t bi = LinearIndex(b, point);
    const bool in_a = !a_flat || (ai >= a_flat->start && ai < a_flat->stop);
    const bool in_b = !b_flat || (bi >= b_flat->start && bi < b_flat->stop);
    if (in_a && in_b) {
      ai -= a_flat ? a_flat->start : 0;
      bi -= b_flat ? b_flat->start : 0;
      if (!runs.empty() && runs.back().a_index + runs.back().count == ai &&
          runs.back().b_index + runs.back().count == bi) {
        ++runs.back().count;
      } else {
        runs.push_back({ai, bi, 1});
      }
    }
    for (size_t axis = region.rank(); axis-- > 0;) {
      if (++point[axis] < region.offset[axis] + region.shape[axis]) break;
      point[axis] = region.offset[axis];
    }
  }
  return runs;
}

// A box of the given rank with extents in [0, 7] (mostly non-zero), offsets in [0, 5].
Box RandomBox(std::mt19937& rng, size_t rank) {
  Box box;
  for (size_t axis = 0; axis < rank; ++axis) {
    box.offset.push_back(std::uniform_int_distribution<int64_t>(0, 5)(rng));
    box.shape.push_back(rng() % 16 == 0 ? 0 : std::uniform_int_distribution<int64_t>(1, 7)(rng));
  }
  return box;
}

// A random sub-box of `box`, often spanning it fully on trailing axes.
Box RandomSubBox(std::mt19937& rng, const Box& box) {
  Box sub = box;
  for (size_t axis = 0; axis < box.rank(); ++axis) {
    if (box.shape[axis] == 0 || rng() % 3 == 0) continue;
    const int64_t lo = std::uniform_int_distribution<int64_t>(0, box.shape[axis] - 1)(rng);
    const int64_t hi = std::uniform_int_distribution<int64_t>(lo + 1, box.shape[axis])(rng);
    sub.offset[axis] = box.offset[axis] + lo;
    sub.shape[axis] = hi - lo;
  }
  return sub;
}

std::optional<FlatRange> RandomFlat(std::mt19937& rng, const Box& box) {
  if (rng() % 2 == 0) return std::nullopt;
  const int64_t volume = box.volume();
  const int64_t start = std::uniform_int_distribution<int64_t>(0, volume)(rng);
  return FlatRange{start, std::uniform_int_distribution<int64_t>(start, volume)(rng)};
}

TEST(BoxTest, CopyRunsMatchPerElementReference) {
  std::mt19937 rng(20240611);
  int checked_runs = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    const size_t rank = rng() % 5;
    // region inside both a and b: grow a and b around a random region.
    const Box region = RandomBox(rng, rank);
    Box a = region;
    Box b = region;
    for (size_t axis = 0; axis < rank; ++axis) {
      for (Box* box : {&a, &b}) {
        if (rng() % 2 == 0) continue;  // keep the region's extent on this axis
        const int64_t before = rng() % 3;
        box->offset[axis] -= before;
        box->shape[axis] += before + rng() % 3;
      }
    }
    if (a.empty() || b.empty()) continue;
    const std::optional<FlatRange> a_flat = RandomFlat(rng, a);
    const std::optional<FlatRange> b_flat = RandomFlat(rng, b);
    const CopyRuns expected = ReferenceCopyRuns(a, a_flat, b, b_flat, region);
    ASSERT_EQ(CollectCopyRuns(a, a_flat, b, b_flat, region), expected)
        << "a=" << a.ToString() << " b=" << b.ToString() << " region=" << region.ToString()
        << " a_flat=" << (a_flat ? a_flat->start : -1) << ":" << (a_flat ? a_flat->stop : -1)
        << " b_flat=" << (b_flat ? b_flat->start : -1) << ":" << (b_flat ? b_flat->stop : -1);
    checked_runs += static_cast<int>(expected.size());
  }
  EXPECT_GT(checked_runs, 20000);  // the cases are not degenerate
}

TEST(BoxTest, SubBoxRunsMatchPerElementReference) {
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 5000; ++iteration) {
    const Box chunk = RandomBox(rng, rng() % 5);
    const Box sub = RandomSubBox(rng, chunk);
    const size_t elem_size = 1 + rng() % 8;
    Runs expected;
    for (const CopyRun& run : ReferenceCopyRuns(chunk, std::nullopt, sub, std::nullopt, sub)) {
      expected.push_back({run.a_index * elem_size, run.count * elem_size});
    }
    ASSERT_EQ(SubBoxRuns(chunk, sub, elem_size), expected)
        << "chunk=" << chunk.ToString() << " sub=" << sub.ToString();
  }
}

TEST(BoxTest, FlatRangeBoxesHandComputed) {
  using Boxes = std::vector<Box>;
  EXPECT_EQ(FlatRangeBoxes(Box{{0, 0}, {4, 3}}, FlatRange{5, 9}),
            (Boxes{Box{{1, 2}, {1, 1}}, Box{{2, 0}, {1, 3}}}));
  // Offsets carry over; 4 boxes for a 3-d range (at most 2 * 3 - 1).
  EXPECT_EQ(FlatRangeBoxes(Box{{10, 0, 0}, {2, 3, 4}}, FlatRange{5, 19}),
            (Boxes{Box{{10, 1, 1}, {1, 1, 3}}, Box{{10, 2, 0}, {1, 1, 4}},
                   Box{{11, 0, 0}, {1, 1, 4}}, Box{{11, 1, 0}, {1, 1, 3}}}));
  EXPECT_EQ(FlatRangeBoxes(Box{{0, 2}, {4, 3}}, FlatRange{0, 12}), (Boxes{Box{{0, 2}, {4, 3}}}));
  EXPECT_EQ(FlatRangeBoxes(Box{{0, 0}, {4, 3}}, FlatRange{3, 9}), (Boxes{Box{{1, 0}, {2, 3}}}));
  EXPECT_EQ(FlatRangeBoxes(Box{{}, {}}, FlatRange{0, 1}), (Boxes{Box{{}, {}}}));
  EXPECT_EQ(FlatRangeBoxes(Box{{0}, {4}}, FlatRange{2, 2}), Boxes{});
  EXPECT_THAT([] { FlatRangeBoxes(Box{{0}, {4}}, FlatRange{2, 5}); }, kThrowsInvalidArgument);
}

TEST(BoxTest, FlatRangeBoxesMatchPerElementReference) {
  std::mt19937 rng(99);
  int multi_box = 0;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    const size_t rank = rng() % 5;
    const Box box = RandomBox(rng, rank);
    const int64_t volume = box.volume();
    const int64_t start = std::uniform_int_distribution<int64_t>(0, volume)(rng);
    const FlatRange range{start, std::uniform_int_distribution<int64_t>(start, volume)(rng)};
    const std::vector<Box> boxes = FlatRangeBoxes(box, range);
    ASSERT_LE(boxes.size(), std::max<size_t>(1, 2 * rank - 1));
    multi_box += boxes.size() > 1;
    // Every element of `box`: in exactly one returned box iff its index is in the range, and the
    // boxes come in row-major order.
    std::vector<int> owner(static_cast<size_t>(volume), -1);
    for (size_t i = 0; i < boxes.size(); ++i) {
      ASSERT_FALSE(boxes[i].empty());
      ASSERT_TRUE(Contains(box, boxes[i])) << boxes[i].ToString() << " in " << box.ToString();
      for (const CopyRun& run :
           ReferenceCopyRuns(box, std::nullopt, boxes[i], std::nullopt, boxes[i])) {
        for (int64_t e = run.a_index; e < run.a_index + run.count; ++e) {
          ASSERT_EQ(owner[e], -1) << "element " << e << " in two boxes";
          owner[e] = static_cast<int>(i);
        }
      }
    }
    int last = 0;
    for (int64_t e = 0; e < volume; ++e) {
      const bool in_range = e >= range.start && e < range.stop;
      ASSERT_EQ(owner[e] >= 0, in_range) << "element " << e << " of " << box.ToString()
                                         << " range [" << range.start << ", " << range.stop << ")";
      if (in_range) {
        ASSERT_GE(owner[e], last);
        last = owner[e];
      }
    }
  }
  EXPECT_GT(multi_box, 1000);  // the ranges are not degenerate
}

}  // namespace
}  // namespace distckpt
