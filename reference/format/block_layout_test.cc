#include "format/block_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace distckpt {
namespace {

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
  const BlockLayout layout = BlockLayout::Tiles({24, 48}, box, false, 2, 24 * 24 * 2, 128);
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
    const BlockLayout layout = BlockLayout::Tiles({96, 24}, box, false, 4, 48 * 24 * 4, 256);
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
  const BlockLayout layout = BlockLayout::Tiles({3, 5, 4}, box, false, 2, 3 * 5 * 4 * 2, 64);
  ExpectTiling(layout);
  const ReadRun run{40, 40, nullptr};  // plane 1
  EXPECT_EQ(TouchedBytes(layout, {&run, 1}), 40u);
}

// Flat chunks and 0-d ones are uniform; an odd-sized run at no cut reads at
// most a tile more at each end.
TEST(BlockLayoutTest, FlatAndScalarChunksAreUniform) {
  const BlockLayout flat = BlockLayout::Tiles({10, 10}, Box{{0, 0}, {10, 10}}, true, 4, 200, 16);
  EXPECT_EQ(flat.tiles(), 13u);
  ExpectTiling(flat);
  const BlockLayout scalar = BlockLayout::Tiles({}, Box{{}, {}}, false, 8, 8, 16);
  EXPECT_EQ(scalar.tiles(), 1u);
  ExpectTiling(scalar);
  const ReadRun run{5, 3, nullptr};
  EXPECT_EQ(TouchedBytes(scalar, {&run, 1}), 8u);
}

// Pieces are contiguous, hold whole tiles and tile the payload.
TEST(BlockLayoutTest, PiecesHoldWholeTiles) {
  for (const BlockLayout& layout :
       {BlockLayout::Tiles({24, 48}, Box{{0, 24}, {24, 24}}, false, 2, 1152, 128),
        BlockLayout::Tiles({4, 100000}, Box{{0, 0}, {4, 100000}}, false, 4, 1600000, 4096),
        BlockLayout::Uniform(1000, 16)}) {
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
