#include "format/block_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "format/tiles_testing.h"

namespace distckpt {
namespace {

constexpr BlockLayout::Flat kRows = BlockLayout::Flat::kRows;
const std::optional<FlatRange> kBox;  // a chunk of its whole box

// Every payload byte lies in exactly one tile.
void ExpectTiling(const BlockLayout& layout) {
  std::vector<int> owner(layout.length(), -1);
  for (uint64_t t = 0; t < layout.tiles(); ++t) {
    layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
      ASSERT_LE(offset + bytes, layout.length());
      for (uint64_t b = offset; b < offset + bytes; ++b) {
        EXPECT_EQ(owner[b], -1) << "byte " << b << " in tiles " << owner[b] << " and " << t;
        owner[b] = static_cast<int>(t);
      }
    });
  }
  for (uint64_t b = 0; b < owner.size(); ++b) EXPECT_NE(owner[b], -1) << "byte " << b;
}

// The bytes of the tiles `runs` touch.
uint64_t TouchedBytes(const BlockLayout& layout, std::span<const ReadRun> runs) {
  uint64_t bytes = 0;
  for (const auto& [first, last] : layout.Touched(runs)) {
    for (uint64_t t = first; t < last; ++t)
      layout.ForEachPart(t, [&](uint64_t, uint64_t n) { bytes += n; });
  }
  return bytes;
}

// The runs of columns [c0, c1) of every row of a [rows, columns] box.
std::vector<ReadRun> ColumnRuns(uint64_t rows, uint64_t columns, uint64_t c0, uint64_t c1,
                                uint64_t element) {
  std::vector<ReadRun> runs;
  for (uint64_t r = 0; r < rows; ++r)
    runs.push_back({(r * columns + c0) * element, (c1 - c0) * element, nullptr});
  return runs;
}

TEST(BlockLayoutTest, UniformIsBlocksOfBlockSize) {
  const BlockLayout layout = BlockLayout::Uniform(100, 16);
  EXPECT_EQ(layout.tiles(), 7u);
  ExpectTiling(layout);
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  layout.ForEachPart(6, [&](uint64_t o, uint64_t n) { parts.emplace_back(o, n); });
  EXPECT_EQ(parts, (std::vector<std::pair<uint64_t, uint64_t>>{{96, 4}}));
  const ReadRun run{20, 30, nullptr};  // bytes [20, 50): blocks 1 to 3
  EXPECT_EQ(layout.Touched({&run, 1}), (std::vector<std::pair<uint64_t, uint64_t>>{{1, 4}}));
}

// gpt-tiny's row-parallel weight under tp=2: [24, 24] of bf16 out of [24, 48].
// Loaded under tp=3 (columns [16, 32) of the global) the chunk's columns
// [16, 24) are read: exactly those bytes, in tiles of many rows.
TEST(BlockLayoutTest, ColumnSplitsAtTensorParallelCutsReadOnlyTheirBytes) {
  const Box box{{0, 0}, {24, 24}};
  const BlockLayout layout = BlockLayout::Tiles({24, 48}, box, kBox, kRows, 2, 24 * 24 * 2, 128);
  ExpectTiling(layout);
  EXPECT_GT(layout.pieces(), 1u);
  EXPECT_FALSE(layout.contiguous());
  for (uint64_t tp : {2, 3, 4, 6, 8}) {
    const uint64_t step = 48 / tp;
    for (uint64_t c0 = 0; c0 < 24; c0 += step) {
      const uint64_t c1 = std::min<uint64_t>(24, c0 + step);
      const std::vector<ReadRun> runs = ColumnRuns(24, 24, c0, c1, 2);
      EXPECT_EQ(TouchedBytes(layout, runs), 24 * (c1 - c0) * 2) << "tp=" << tp << " c0=" << c0;
    }
  }
  // A tile holds many rows: 8 bytes of sums per far more than 8 bytes.
  EXPECT_LE(layout.tiles() * 8, layout.length() / 4);
}

// Rows too: a column-parallel weight [96, 24] split at any tp in [2, 8]
// reads only its rows, whatever the chunk's offset.
TEST(BlockLayoutTest, RowSplitsAtTensorParallelCutsReadOnlyTheirRows) {
  for (int64_t offset : {0, 48}) {
    const Box box{{offset, 0}, {48, 24}};
    const BlockLayout layout = BlockLayout::Tiles({96, 24}, box, kBox, kRows, 4, 48 * 24 * 4, 256);
    ExpectTiling(layout);
    for (uint64_t tp : {2, 3, 4, 6, 8}) {
      const uint64_t step = 96 / tp;
      for (uint64_t g = offset / step * step; g < static_cast<uint64_t>(offset) + 48; g += step) {
        const uint64_t r0 = std::max<uint64_t>(g, offset) - offset;
        const uint64_t r1 = std::min<uint64_t>(g + step, offset + 48) - offset;
        const ReadRun run{r0 * 24 * 4, (r1 - r0) * 24 * 4, nullptr};
        EXPECT_EQ(TouchedBytes(layout, {&run, 1}), run.length) << "tp=" << tp << " row " << g;
      }
    }
  }
}

// Planes (the axes before the last two) bound groups; a box of one plane per
// expert reads one expert without its neighbours.
TEST(BlockLayoutTest, GroupsStayInsideAPlane) {
  const Box box{{0, 0, 0}, {3, 5, 4}};
  const BlockLayout layout = BlockLayout::Tiles({3, 5, 4}, box, kBox, kRows, 2, 3 * 5 * 4 * 2, 64);
  ExpectTiling(layout);
  const ReadRun run{40, 40, nullptr};  // plane 1
  EXPECT_EQ(TouchedBytes(layout, {&run, 1}), 40u);
}

// 0-d chunks are uniform, and flat chunks of native version 4 and DCP index
// versions 3 and 4 (Flat::kUniform); an odd-sized run at no cut reads at
// most a tile more at each end.
TEST(BlockLayoutTest, ScalarAndVersion4FlatChunksAreUniform) {
  const BlockLayout flat = BlockLayout::Tiles({10, 10}, Box{{0, 0}, {10, 10}}, FlatRange{0, 50},
                                              BlockLayout::Flat::kUniform, 4, 200, 16);
  EXPECT_EQ(flat.tiles(), 13u);
  ExpectTiling(flat);
  const ReadRun column{8, 8, nullptr};  // elements 2 and 3 of row 0: block 0
  EXPECT_EQ(flat.Touched({&column, 1}), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}}));
  const BlockLayout scalar = BlockLayout::Tiles({}, Box{{}, {}}, kBox, kRows, 8, 8, 16);
  EXPECT_EQ(scalar.tiles(), 1u);
  ExpectTiling(scalar);
  const ReadRun run{5, 3, nullptr};
  EXPECT_EQ(TouchedBytes(scalar, {&run, 1}), 8u);
}

// The tiles `runs` touch are exactly those holding a byte of them.
void ExpectTouchedExactly(const BlockLayout& layout, std::span<const ReadRun> runs) {
  std::vector<uint64_t> owner(layout.length());
  for (uint64_t t = 0; t < layout.tiles(); ++t) {
    layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
      for (uint64_t b = offset; b < offset + bytes; ++b) owner[b] = t;
    });
  }
  std::vector<bool> want(layout.tiles(), false), got(layout.tiles(), false);
  for (const ReadRun& run : runs) {
    for (uint64_t b = run.offset_in_chunk; b < run.offset_in_chunk + run.length; ++b)
      want[owner[b]] = true;
  }
  for (const auto& [first, last] : layout.Touched(runs)) {
    ASSERT_LE(last, layout.tiles());
    for (uint64_t t = first; t < last; ++t) got[t] = true;
  }
  EXPECT_EQ(got, want);
}

// A chunk of elements [start, stop) of `box`.
StoredChunk FlatChunk(const Box& box, uint64_t start, uint64_t stop) {
  StoredChunk chunk;
  chunk.box = box;
  chunk.flat = FlatRange{static_cast<int64_t>(start), static_cast<int64_t>(stop)};
  return chunk;
}

// A distributed-optimizer state (a flat range of a row-parallel weight's box,
// whose rows a tp cut splits into columns, and whose first and last rows are
// partial) is cut into tiles of its rows (Flat::kRows): a load at any tp in
// [2, 8] reads exactly the columns it needs, and so does a load of rows.
TEST(BlockLayoutTest, FlatChunksReadOnlyTheColumnsTheyNeed) {
  struct Case {
    Shape global;
    Box box;
    uint64_t element, block;
  };
  for (const Case& c :
       {Case{{24, 48}, {{0, 0}, {24, 48}}, 4, 256},   // the whole weight
        Case{{24, 48}, {{0, 24}, {24, 24}}, 4, 128},  // a tp=2 shard of it
        Case{{16, 840}, {{0, 0}, {16, 840}}, 4, 4096}, Case{{8, 120}, {{0, 0}, {8, 120}}, 2, 16}}) {
    const uint64_t rows = static_cast<uint64_t>(c.box.shape[0]);
    const uint64_t columns = static_cast<uint64_t>(c.box.shape[1]);
    const uint64_t n = rows * columns;
    for (const auto& [start, stop] :
         std::vector<std::pair<uint64_t, uint64_t>>{{0, n},
                                                    {5, n - 3},
                                                    {columns, 3 * columns},
                                                    {columns - 1, 2 * columns + 1},
                                                    {columns + 2, columns + 7},
                                                    {7, n / 2 + 3},
                                                    {n / 2 - 1, n},
                                                    {n - 1, n}}) {
      SCOPED_TRACE(testing::Message()
                   << "global " << ShapeToString(c.global) << " box " << ShapeToString(c.box.shape)
                   << " flat [" << start << ", " << stop << ")");
      const uint64_t length = (stop - start) * c.element;
      const BlockLayout layout =
          BlockLayout::Tiles(c.global, c.box, FlatRange{int64_t(start), int64_t(stop)}, kRows,
                             c.element, length, c.block);
      ExpectTiling(layout);
      const uint64_t global_columns = static_cast<uint64_t>(c.global[1]);
      const uint64_t offset = static_cast<uint64_t>(c.box.offset[1]);
      for (uint64_t tp = 2; tp <= 8; ++tp) {
        if (global_columns % tp != 0) continue;
        const uint64_t step = global_columns / tp;
        for (uint64_t g = offset / step * step; g < offset + columns; g += step) {
          const uint64_t c0 = std::max(g, offset) - offset;
          const uint64_t c1 = std::min(g + step, offset + columns) - offset;
          const std::vector<ReadRun> runs =
              ColumnRunsOf(FlatChunk(c.box, start, stop), c0 + offset, c1 + offset, c.element);
          uint64_t needed = 0;
          for (const ReadRun& run : runs) needed += run.length;
          EXPECT_EQ(TouchedBytes(layout, runs), needed) << "tp=" << tp << " columns " << c0;
          ExpectTouchedExactly(layout, runs);
        }
        // Rows [r0, r1) at a cut of the row axis (cut when the chunk holds
        // its columns whole).
        const uint64_t global_rows = static_cast<uint64_t>(c.global[0]);
        if (columns != global_columns || global_rows % tp != 0) continue;
        for (uint64_t r0 = 0; r0 < rows; r0 += global_rows / tp) {
          const uint64_t a = std::max(start, r0 * columns);
          const uint64_t b = std::min(stop, (r0 + global_rows / tp) * columns);
          if (a >= b) continue;
          const ReadRun run{(a - start) * c.element, (b - a) * c.element, nullptr};
          EXPECT_EQ(TouchedBytes(layout, {&run, 1}), run.length) << "tp=" << tp << " row " << r0;
        }
      }
      // Any run touches exactly the tiles holding its bytes.
      for (uint64_t a = 0; a < length; a += 1 + length / 7) {
        for (uint64_t b = a + 1; b <= length; b += 1 + length / 5) {
          const ReadRun run{a, b - a, nullptr};
          ExpectTouchedExactly(layout, {&run, 1});
        }
      }
    }
  }
}

// A flat range inside one row is that row's pieces it holds; an empty one
// has no tiles; a 1-d flat chunk is one partial row.
TEST(BlockLayoutTest, FlatRangesInsideOneRowAndEmpty) {
  const Box box{{0, 0}, {4, 100}};
  // Row 1, elements [30, 70): pieces at multiples of 100 / t (t = 2, 4, 5):
  // 40, 50, 60 (and 25, 75, 20, 80 outside): [30, 40) [40, 50) [50, 60) [60, 70).
  const BlockLayout inside =
      BlockLayout::Tiles({4, 100}, box, FlatRange{130, 170}, kRows, 4, 160, 4096);
  ExpectTiling(inside);
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  for (uint64_t t = 0; t < inside.tiles(); ++t)
    inside.ForEachPart(t, [&](uint64_t o, uint64_t n) { parts.emplace_back(o, n); });
  EXPECT_EQ(parts,
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 40}, {40, 40}, {80, 40}, {120, 40}}));
  const BlockLayout empty = BlockLayout::Tiles({4, 100}, box, FlatRange{130, 130}, kRows, 4, 0, 16);
  EXPECT_EQ(empty.tiles(), 0u);
  EXPECT_TRUE(empty.Touched({}).empty());
  const BlockLayout one_d =
      BlockLayout::Tiles({96}, Box{{0}, {96}}, FlatRange{13, 77}, kRows, 2, 128, 16);
  ExpectTiling(one_d);
  for (uint64_t tp = 2; tp <= 8; ++tp) {
    if (96 % tp != 0) continue;
    for (uint64_t g = 0; g < 96; g += 96 / tp) {
      const std::vector<ReadRun> runs =
          ColumnRunsOf(FlatChunk(Box{{0, 0}, {1, 96}}, 13, 77), g, g + 96 / tp, 2);
      if (runs.empty()) continue;
      EXPECT_EQ(TouchedBytes(one_d, runs), runs[0].length) << "tp=" << tp << " at " << g;
    }
  }
}

// A flat range of whole rows is cut as a chunk of those rows would be.
TEST(BlockLayoutTest, FlatRangesOfWholeRowsAreCutLikeTheirRows) {
  const Box box{{0, 0}, {24, 48}};  // of a [48, 48] tensor: its rows are cut
  const BlockLayout flat =
      BlockLayout::Tiles({48, 48}, box, FlatRange{4 * 48, 12 * 48}, kRows, 2, 8 * 48 * 2, 128);
  const BlockLayout rows =
      BlockLayout::Tiles({48, 48}, Box{{4, 0}, {8, 48}}, kBox, kRows, 2, 8 * 48 * 2, 128);
  EXPECT_GT(flat.tiles(), 1u);
  ASSERT_EQ(flat.tiles(), rows.tiles());
  for (uint64_t t = 0; t < flat.tiles(); ++t) {
    std::vector<std::pair<uint64_t, uint64_t>> a, b;
    flat.ForEachPart(t, [&](uint64_t o, uint64_t n) { a.emplace_back(o, n); });
    rows.ForEachPart(t, [&](uint64_t o, uint64_t n) { b.emplace_back(o, n); });
    EXPECT_EQ(a, b) << t;
  }
}

// Pieces are contiguous, hold whole tiles and tile the payload.
TEST(BlockLayoutTest, PiecesHoldWholeTiles) {
  for (const BlockLayout& layout :
       {BlockLayout::Tiles({24, 48}, Box{{0, 24}, {24, 24}}, kBox, kRows, 2, 1152, 128),
        BlockLayout::Tiles({4, 100000}, Box{{0, 0}, {4, 100000}}, kBox, kRows, 4, 1600000, 4096),
        BlockLayout::Uniform(1000, 16),
        // Flat: partial first and last rows, in groups of rows, and long rows.
        BlockLayout::Tiles({24, 48}, Box{{0, 24}, {24, 24}}, FlatRange{37, 530}, kRows, 2, 986,
                           128),
        BlockLayout::Tiles({4, 100000}, Box{{0, 0}, {4, 100000}}, FlatRange{99999, 300001}, kRows,
                           4, 800008, 4096)}) {
    ExpectTiling(layout);
    uint64_t tile = 0, byte = 0;
    for (const BlockLayout::Piece& piece : layout.Pieces(256)) {
      EXPECT_EQ(piece.first, tile);
      EXPECT_EQ(piece.begin, byte);
      for (uint64_t t = piece.first; t < piece.last; ++t) {
        layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
          EXPECT_GE(offset, piece.begin);
          EXPECT_LE(offset + bytes, piece.end);
        });
      }
      tile = piece.last;
      byte = piece.end;
    }
    EXPECT_EQ(tile, layout.tiles());
    EXPECT_EQ(byte, layout.length());
  }
}

}  // namespace
}  // namespace distckpt
