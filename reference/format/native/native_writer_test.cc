// NativeWriter with helper threads hashing its large chunks: the same data
// file, the same errors and no thread left behind. Round trips of the format
// are in native_format_test.cc.
#include "format/native/native_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "core/helper_pool.h"
#include "format/block_checksums.h"
#include "format/hashed_writes.h"
#include "io/fault_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

constexpr size_t kMiB = 1 << 20;

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> bytes(n);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
  return bytes;
}

// Writes `sizes[i]` bytes of `data` (from offset i) as u8 tensor "t<i>" with
// a writer of `helpers` helpers, one WriteTensorChunk each or all in one
// WriteTensorChunks (`together`); returns its metadata.
CheckpointMetadata WriteChunks(Env* env, const std::string& dir, const std::vector<size_t>& sizes,
                               const std::vector<std::byte>& data, int helpers,
                               bool together = false) {
  NativeWriter writer(env, dir, /*rank=*/0);
  writer.SetHelpers(helpers);
  std::vector<std::string> keys;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back("t" + std::to_string(i));
    shapes.push_back({static_cast<int64_t>(sizes[i])});
  }
  std::vector<ChunkToWrite> chunks;
  for (size_t i = 0; i < sizes.size(); ++i) {
    chunks.push_back({&keys[i], DType::kU8, &shapes[i], Box{{0}, shapes[i]}, std::nullopt,
                      std::span(data).subspan(i % 64, sizes[i])});
  }
  if (together) {
    writer.WriteTensorChunks(chunks);
  } else {
    for (const ChunkToWrite& c : chunks)
      writer.WriteTensorChunk(*c.key, c.dtype, *c.global_shape, c.box, c.flat, c.bytes);
  }
  return writer.Finish();
}

// The OS threads of this process.
size_t ThreadCount() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Whether every thread of the helper pool joins a new call within 10 s.
bool EveryHelperIsFree() {
  std::atomic<int> started{0};
  const int helpers = HelperPoolSize();
  RunWithHelpers(helpers, [&](size_t call) {
    if (call != 0) {
      ++started;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started < helpers && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  return started == helpers;
}

class NativeWriterTest : public testing::Test {
 protected:
  std::string DataFile(const std::string& dir) const { return JoinPath(dir, DataFileName(0, 0)); }

  ScopedTempDir tmp_;
  const std::string alone_ = JoinPath(tmp_.path(), "alone");
  const std::string helped_ = JoinPath(tmp_.path(), "helped");
};

// Chunks just below, at and above the size from which helpers hash, ending
// inside a piece, on a piece or inside a block, among small chunks of small
// blocks: with a helper the file and the metadata are the same as without.
TEST_F(NativeWriterTest, HelpersWriteTheSameFile) {
  const size_t min = kHashOffloadMinBytes;
  std::vector<size_t> sizes = {
      min - 1, min, min + 1, 3 * min + 4096 + 7, 5 * kMiB + 4096, 100, 1000, 5000, 20000, 70000};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 12; ++i) {
    sizes.push_back(min / 2 + rng() % (8 * min));
    sizes.push_back(rng() % min);
  }
  std::set<uint64_t> block_sizes;
  for (size_t size : sizes) block_sizes.insert(ChooseBlockSize(size));
  EXPECT_GE(block_sizes.size(), 4u);
  const std::vector<std::byte> data = RandomBytes(5 * kMiB + 4096 + 64, 1);
  std::filesystem::create_directories(alone_);
  const CheckpointMetadata alone = WriteChunks(Env::Default(), alone_, sizes, data, 0);
  const std::string want = ReadFileToString(Env::Default(), DataFile(alone_));
  EXPECT_GT(want.size(), 5 * kMiB);
  for (bool together : {false, true}) {
    SCOPED_TRACE(together ? "together" : "one by one");
    std::filesystem::remove_all(helped_);
    std::filesystem::create_directories(helped_);
    const CheckpointMetadata helped =
        WriteChunks(Env::Default(), helped_, sizes, data, 1, together);
    EXPECT_EQ(helped, alone);
    EXPECT_TRUE(ReadFileToString(Env::Default(), DataFile(helped_)) == want);
  }
}

// Many small chunks handed over together (runs of them hashed ahead by
// helpers, each run one gathered write), empty ones and large ones among
// them: the same file and metadata as one by one without helpers.
TEST_F(NativeWriterTest, SmallChunksTogetherWriteTheSameFile) {
  std::mt19937_64 rng(11);
  std::vector<size_t> sizes;
  size_t runs_of_small = 0, small = 0;
  for (int i = 0; i < 700; ++i) {
    const uint64_t kind = rng() % 20;
    const size_t size = kind == 0   ? 0
                        : kind == 1 ? kHashOffloadMinBytes + rng() % kMiB
                        : kind < 8  ? 1 + rng() % 64
                                    : 1 + rng() % (kHashOffloadMinBytes - 1);
    runs_of_small +=
        size < kHashOffloadMinBytes && (sizes.empty() || sizes.back() >= kHashOffloadMinBytes);
    small += size < kHashOffloadMinBytes;
    sizes.push_back(size);
  }
  EXPECT_GE(runs_of_small, 10u);  // runs between large chunks
  EXPECT_GE(small, 600u);
  const std::vector<std::byte> data = RandomBytes(kHashOffloadMinBytes + kMiB + 64, 3);
  std::filesystem::create_directories(alone_);
  const CheckpointMetadata alone = WriteChunks(Env::Default(), alone_, sizes, data, 0);
  const std::string want = ReadFileToString(Env::Default(), DataFile(alone_));
  for (int helpers : {0, 1, 2}) {
    SCOPED_TRACE(helpers);
    std::filesystem::remove_all(helped_);
    std::filesystem::create_directories(helped_);
    const CheckpointMetadata helped =
        WriteChunks(Env::Default(), helped_, sizes, data, helpers, /*together=*/true);
    EXPECT_EQ(helped, alone);
    EXPECT_TRUE(ReadFileToString(Env::Default(), DataFile(helped_)) == want);
  }
}

// Runs of chunks with equal shapes share one tile layout when written
// together: chunks that differ from the one before only in their box's
// offset, their tensor's global shape, their element size or key (same
// length) get the tiles and sums of their own inputs, as one by one.
TEST_F(NativeWriterTest, ChunksOfEqualShapesTogetherWriteTheSameFile) {
  struct Spec {
    std::string key;
    DType dtype;
    Shape global;
    Box box;
  };
  // Row blocks of [180, 2] (rows narrower than a block: a tile holds 4) at
  // offsets 0 and 45 are cut at different rows (30, 36 and 15, 27 of
  // theirs); [150, 2]'s first block at rows 25 and 30.
  std::vector<Spec> specs;
  for (int64_t r : {0, 0, 45, 45, 90, 135})
    specs.push_back({"a", DType::kF32, {180, 2}, {{r, 0}, {45, 2}}});
  specs.push_back({"b", DType::kF32, {150, 2}, {{0, 0}, {45, 2}}});
  specs.push_back({"c", DType::kI32, {150, 2}, {{0, 0}, {45, 2}}});
  specs.push_back({"d", DType::kBF16, {150, 4}, {{0, 0}, {45, 4}}});
  specs.push_back({"e", DType::kF32, {180, 2}, {{0, 0}, {45, 2}}});
  for (size_t i = 0; i < specs.size(); ++i) specs[i].key += std::to_string(i);
  constexpr size_t kBytes = 45 * 2 * 4;
  const std::vector<std::byte> data = RandomBytes(kBytes + 64, 5);
  std::vector<ChunkToWrite> chunks;
  for (size_t i = 0; i < specs.size(); ++i) {
    chunks.push_back({&specs[i].key, specs[i].dtype, &specs[i].global, specs[i].box, std::nullopt,
                      std::span(data).subspan(i, kBytes)});
  }
  std::vector<std::string> files;
  std::vector<CheckpointMetadata> metadata;
  for (bool together : {false, true}) {
    const std::string dir = together ? helped_ : alone_;
    std::filesystem::create_directories(dir);
    NativeWriter writer(Env::Default(), dir, /*rank=*/0);
    if (together) {
      writer.WriteTensorChunks(chunks);
    } else {
      for (const ChunkToWrite& c : chunks)
        writer.WriteTensorChunk(*c.key, c.dtype, *c.global_shape, c.box, c.flat, c.bytes);
    }
    metadata.push_back(writer.Finish());
    files.push_back(ReadFileToString(Env::Default(), DataFile(dir)));
  }
  EXPECT_EQ(metadata[1], metadata[0]);
  EXPECT_TRUE(files[1] == files[0]);
  // The offsets and global shapes above do cut these chunks differently,
  // and the chunks that share inputs share a layout.
  auto tensor = [&](const std::string& key) -> const StoredTensor& {
    return metadata[0].tensors.at(key);
  };
  auto parts = [&](const std::string& key) {
    const BlockLayout layout = TileLayout(tensor(key), tensor(key).chunks.at(0));
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (uint64_t t = 0; t < layout.tiles(); ++t)
      layout.ForEachPart(t, [&](uint64_t at, uint64_t n) { out.push_back({at, n}); });
    return out;
  };
  auto same = [&](const std::string& a, const std::string& b) {
    return SameTileInputs(tensor(a), tensor(a).chunks.at(0), tensor(b), tensor(b).chunks.at(0));
  };
  EXPECT_NE(parts("a0"), parts("a2"));
  EXPECT_NE(parts("a0"), parts("b6"));
  EXPECT_NE(parts("a0"), parts("a4"));
  EXPECT_EQ(parts("a0"), parts("e9"));
  EXPECT_TRUE(same("a0", "a1"));
  EXPECT_TRUE(same("a0", "e9"));
  EXPECT_FALSE(same("a1", "a2"));
  EXPECT_FALSE(same("a4", "a5"));
  EXPECT_FALSE(same("a5", "b6"));
  EXPECT_TRUE(same("b6", "c7"));  // i32 and f32: 4 bytes an element
  EXPECT_FALSE(same("c7", "d8"));
}

// Writes `sizes` on a disk that fills up after 3 MiB + 12345 bytes, without
// helpers and with one (handing the chunks over together when `together`):
// the same I/O error and bytes, and no thread still at work after.
void ExpectTheSameFailure(const std::string& dir, const std::vector<size_t>& sizes,
                          const std::vector<std::byte>& data, bool together) {
  const std::string file = JoinPath(dir, DataFileName(0, 0));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(EveryHelperIsFree());  // also starts the pool's threads
  const size_t threads = ThreadCount();
  std::string errors[2], files[2];
  for (int helpers : {0, 1}) {
    FaultInjectionEnv full_disk(Env::Default());
    full_disk.FailWritesAfter(3 * kMiB + 12345);
    try {
      WriteChunks(&full_disk, dir, sizes, data, helpers, together && helpers > 0);
      ADD_FAILURE() << "no error with " << helpers << " helpers";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      errors[helpers] = e.what();
    }
    files[helpers] = ReadFileToString(Env::Default(), file);
    std::filesystem::remove(file);
  }
  EXPECT_EQ(errors[1], errors[0]);
  EXPECT_NE(errors[0], "");
  EXPECT_EQ(files[0].size(), 3 * kMiB + 12345);
  EXPECT_TRUE(files[1] == files[0]);
  EXPECT_EQ(ThreadCount(), threads);
  EXPECT_TRUE(EveryHelperIsFree());
}

// The disk fills up in the middle of a chunk that helpers hash.
TEST_F(NativeWriterTest, AFailedWriteWithHelpersThrowsTheSameError) {
  const std::vector<std::byte> data = RandomBytes(8 * kMiB, 2);
  ExpectTheSameFailure(alone_, {data.size() - 64}, data, /*together=*/false);
}

// The same with small chunks hashed ahead and written in gathered writes.
TEST_F(NativeWriterTest, AFailedWriteOfSmallChunksTogetherThrowsTheSameError) {
  ExpectTheSameFailure(alone_, std::vector<size_t>(200, 40000), RandomBytes(40000 + 64, 4),
                       /*together=*/true);
}

}  // namespace
}  // namespace distckpt
