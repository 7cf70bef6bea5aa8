#include "format/block_reads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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
    for (size_t i = 0; i < runs.size(); ++i) {
      EXPECT_EQ(dsts[i].front(), std::byte{0x5a});
      EXPECT_EQ(dsts[i].back(), std::byte{0x5a});
      EXPECT_EQ(0,
                std::memcmp(runs[i].dst, payload.data() + runs[i].offset_in_chunk, runs[i].length))
          << "trial " << trial << ", run " << i;
    }
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

}  // namespace
}  // namespace distckpt
