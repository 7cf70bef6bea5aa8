#include "format/block_reads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "format/block_checksums.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

// A payload in memory at byte `base` of a file of junk.
class MemoryFile : public RandomAccessFile {
 public:
  MemoryFile(uint64_t base, std::vector<std::byte> payload)
      : base_(base), bytes_(base, std::byte{0xee}) {
    bytes_.insert(bytes_.end(), payload.begin(), payload.end());
  }
  void Read(uint64_t offset, std::span<std::byte> dst) const override {
    ASSERT_LE(offset + dst.size(), bytes_.size());
    std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
    bytes_read_ += dst.size();
  }
  uint64_t size() const override { return bytes_.size(); }
  const std::string& path() const override { return path_; }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  uint64_t base_;
  std::vector<std::byte> bytes_;
  std::string path_ = "memory";
  mutable uint64_t bytes_read_ = 0;
};

// Each run's buffer (a guard byte each side) holds its payload bytes and
// nothing was written beside it.
void ExpectRunsGotTheirBytes(const std::vector<ReadRun>& runs,
                             const std::vector<std::vector<std::byte>>& dsts,
                             const std::vector<std::byte>& payload, int trial) {
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(dsts[i].front(), std::byte{0x5a});
    EXPECT_EQ(dsts[i].back(), std::byte{0x5a});
    EXPECT_EQ(0, std::memcmp(runs[i].dst, payload.data() + runs[i].offset_in_chunk, runs[i].length))
        << "trial " << trial << ", run " << i;
  }
}

// Random payloads, block sizes and runs: the runs get their bytes and
// nothing else is written; the check sees each touched block (every block
// when `all`) once, in order, in calls that start at a block boundary, end
// at one or at the payload's end and hold at most 256 KiB (or one block),
// with the file's bytes; the count returned is the bytes read.
TEST(ReadCheckedBlocksTest, ChecksEveryTouchedBlockOnceInWholeBlockWindows) {
  std::mt19937_64 rng(18);
  const uint64_t kBlocks[] = {1, 16, 1000, 4096, 65536, 1 << 20};
  int multi_block_calls = 0, partial_cases = 0, short_tails = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t block = kBlocks[rng() % std::size(kBlocks)];
    const uint64_t length = 1 + rng() % (block == 1 ? 4096 : 3 * (256 << 10) + 5000);
    std::vector<std::byte> payload(length);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    const uint64_t base = rng() % 100;
    MemoryFile file(base, payload);
    const bool all = rng() % 4 == 0;
    // Sorted, disjoint runs, each into its own buffer.
    std::vector<ReadRun> runs;
    std::vector<std::vector<std::byte>> dsts;
    for (uint64_t at = rng() % (length / 2 + 1); at < length;) {
      const uint64_t n = 1 + rng() % std::min<uint64_t>(length - at, 300000);
      dsts.emplace_back(n + 2, std::byte{0x5a});  // a guard byte each side
      runs.push_back({at, n, nullptr});
      at += n + rng() % (length / 3 + 1);
    }
    for (size_t i = 0; i < runs.size(); ++i) runs[i].dst = dsts[i].data() + 1;
    partial_cases += !all;

    std::vector<uint64_t> checked;  // block indexes, in the order seen
    const uint64_t read = ReadCheckedBlocks(
        file, base, length, block, runs, all,
        [&](uint64_t first, std::span<const std::byte> bytes) {
          const uint64_t from = first * block;
          ASSERT_LT(from, length);
          ASSERT_LE(bytes.size(), std::max<uint64_t>(block, 256 << 10));
          const uint64_t blocks = (bytes.size() + block - 1) / block;
          ASSERT_TRUE(bytes.size() % block == 0 || from + bytes.size() == length);
          short_tails += bytes.size() % block != 0;
          multi_block_calls += blocks > 1;
          ASSERT_EQ(0, std::memcmp(bytes.data(), payload.data() + from, bytes.size()));
          for (uint64_t b = 0; b < blocks; ++b) checked.push_back(first + b);
        });

    std::vector<uint64_t> want;
    const uint64_t count = (length + block - 1) / block;
    for (uint64_t b = 0; b < count; ++b) {
      const bool touched = std::any_of(runs.begin(), runs.end(), [&](const ReadRun& r) {
        return r.offset_in_chunk < (b + 1) * block && r.offset_in_chunk + r.length > b * block;
      });
      if (all || touched) want.push_back(b);
    }
    ASSERT_EQ(checked, want) << "trial " << trial << ", block " << block << ", length " << length;
    uint64_t want_bytes = 0;
    for (uint64_t b : want) want_bytes += std::min(block, length - b * block);
    EXPECT_EQ(read, want_bytes);
    EXPECT_EQ(file.bytes_read(), want_bytes);
    ExpectRunsGotTheirBytes(runs, dsts, payload, trial);
  }
  // The cases that matter were drawn.
  EXPECT_GT(multi_block_calls, 100);
  EXPECT_GT(partial_cases, 200);
  EXPECT_GT(short_tails, 50);
}

// A check that throws stops the read with its error.
TEST(ReadCheckedBlocksTest, AThrowingCheckStopsTheRead) {
  std::vector<std::byte> payload(1 << 20, std::byte{1});
  MemoryFile file(0, payload);
  std::vector<std::byte> dst(payload.size());
  const ReadRun run{0, payload.size(), dst.data()};
  int calls = 0;
  EXPECT_THROW(ReadCheckedBlocks(file, 0, payload.size(), 4096, std::span(&run, 1), false,
                                 [&](uint64_t, std::span<const std::byte>) {
                                   ++calls;
                                   throw std::runtime_error("bad block");
                                 }),
               std::runtime_error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(file.bytes_read(), uint64_t{256} << 10);  // the first window only
}

// Version 4 and 5 tiles (row pieces of multi-dimensional chunks: not
// contiguous; flat chunks' rows): random shapes, boxes, flat ranges and runs. The runs get their
// bytes and nothing else is written; every touched tile (every tile when `all`) is checked once,
// against the checksum its parts streamed one by one give (TileChecksum
// gathers them: the same value); the bytes read are those tiles' bytes; and
// a changed byte of a touched tile is refused naming that tile.
TEST(ReadCheckedTilesTest, ChecksEveryTouchedTileOnceAgainstItsStreamedChecksum) {
  std::mt19937_64 rng(40);
  const int64_t kDims[] = {1, 2, 3, 7, 64, 96, 512, 1024, 1536};
  int scattered = 0, partial_cases = 0, flips = 0, flat_cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t k = 1 + rng() % 3;
    Shape global(k), offset(k, 0), shape(k);
    for (size_t d = 0; d < k; ++d) {
      global[d] = kDims[rng() % std::size(kDims)];
      shape[d] = rng() % 3 == 0 ? global[d] : 1 + static_cast<int64_t>(rng() % global[d]);
      offset[d] = static_cast<int64_t>(rng() % (global[d] - shape[d] + 1));
    }
    const uint64_t element = uint64_t{1} << (rng() % 3);
    const uint64_t block = rng() % 2 ? 4096 : 256;
    uint64_t length = element;
    for (int64_t d : shape) length *= static_cast<uint64_t>(d);
    if (length > (4 << 20)) continue;
    // A third of the chunks flat (version 5: tiles of the box's rows, the
    // first and last possibly partial).
    std::optional<FlatRange> flat;
    if (rng() % 3 == 0 && length > element) {
      const int64_t volume = static_cast<int64_t>(length / element);
      const int64_t start = static_cast<int64_t>(rng() % volume);
      flat = FlatRange{start, start + 1 + static_cast<int64_t>(rng() % (volume - start))};
      length = static_cast<uint64_t>(flat->size()) * element;
      ++flat_cases;
    }
    const BlockLayout layout = BlockLayout::Tiles(global, Box{offset, shape}, flat,
                                                  BlockLayout::Flat::kRows, element, length, block);
    scattered += !layout.contiguous();
    std::vector<std::byte> payload(length);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    const uint64_t seed = rng();
    std::vector<uint64_t> sums(layout.tiles());
    Checksummer streamed;
    for (uint64_t t = 0; t < layout.tiles(); ++t) {
      streamed.Reset(BlockSeed(seed, t));
      layout.ForEachPart(
          t, [&](uint64_t at, uint64_t n) { streamed.Update(std::span(payload.data() + at, n)); });
      sums[t] = streamed.Digest();
    }
    const uint64_t base = rng() % 100;
    MemoryFile file(base, payload);
    const bool all = rng() % 4 == 0;
    partial_cases += !all;
    std::vector<ReadRun> runs;
    std::vector<std::vector<std::byte>> dsts;
    const uint64_t row = static_cast<uint64_t>(shape[k - 1]) * element;
    if (rng() % 3 == 0 && row >= 4) {  // two column windows of every row (two TP slices)
      const uint64_t a = rng() % (row / 2), b = a + 1 + rng() % (row / 2 - a);
      const uint64_t c = b + rng() % (row - b), d = c + 1 + rng() % (row - c);
      for (uint64_t r = 0; r < length / row; ++r) {
        for (const auto& [from, to] : {std::pair{a, b}, std::pair{c, d}}) {
          if (to <= from ||
              (!runs.empty() && runs.back().offset_in_chunk + runs.back().length > r * row + from))
            continue;
          dsts.emplace_back(to - from + 2, std::byte{0x5a});
          runs.push_back({r * row + from, to - from, nullptr});
        }
      }
    } else {
      for (uint64_t at = rng() % (length / 2 + 1); at < length;) {
        const uint64_t n = 1 + rng() % std::min<uint64_t>(length - at, rng() % 2 ? 64 : 300000);
        dsts.emplace_back(n + 2, std::byte{0x5a});
        runs.push_back({at, n, nullptr});
        at += n + rng() % (rng() % 2 ? 200 : length / 3 + 1);
      }
    }
    for (size_t i = 0; i < runs.size(); ++i) runs[i].dst = dsts[i].data() + 1;

    std::vector<std::pair<uint64_t, uint64_t>> want =
        all ? std::vector<std::pair<uint64_t, uint64_t>>{{0, layout.tiles()}}
            : layout.Touched(runs);
    uint64_t want_bytes = 0;
    std::vector<uint64_t> want_tiles;
    for (const auto& [first, last] : want) {
      for (uint64_t t = first; t < last; ++t) {
        want_tiles.push_back(t);
        layout.ForEachPart(t, [&](uint64_t, uint64_t n) { want_bytes += n; });
      }
    }
    std::vector<uint64_t> checked;
    const uint64_t read = ReadCheckedTiles(
        file, base, layout, runs, all, sums, seed,
        [&](uint64_t t, uint64_t) { ADD_FAILURE() << "tile " << t << " mismatched"; });
    ReadCheckedTiles(file, base, layout, runs, all,
                     [&](std::span<const uint64_t> tiles, const WindowBytes&) {
                       checked.insert(checked.end(), tiles.begin(), tiles.end());
                     });
    ASSERT_EQ(checked, want_tiles) << "trial " << trial;
    EXPECT_EQ(read, want_bytes) << "trial " << trial;
    ExpectRunsGotTheirBytes(runs, dsts, payload, trial);
    // A flipped byte of a touched tile (a byte no run asks for, when there is one).
    if (want_tiles.empty()) continue;
    const uint64_t tile = want_tiles[rng() % want_tiles.size()];
    std::vector<std::pair<uint64_t, uint64_t>> parts;
    layout.ForEachPart(tile, [&](uint64_t at, uint64_t n) {
      if (n > 0) parts.emplace_back(at, n);
    });
    const auto& [at, n] = parts[rng() % parts.size()];
    std::vector<std::byte> damaged = payload;
    damaged[at + rng() % n] ^= std::byte{0x10};
    MemoryFile bad(base, damaged);
    std::vector<uint64_t> refused;
    ReadCheckedTiles(bad, base, layout, runs, all, sums, seed,
                     [&](uint64_t t, uint64_t) { refused.push_back(t); });
    EXPECT_EQ(refused, std::vector<uint64_t>{tile}) << "trial " << trial;
    ++flips;
  }
  EXPECT_GT(scattered, 30);
  EXPECT_GT(partial_cases, 100);
  EXPECT_GT(flat_cases, 50);
  EXPECT_GT(flips, 100);
}

}  // namespace
}  // namespace distckpt
