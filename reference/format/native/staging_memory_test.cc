// The per-load staging budget (issue 39): a verified part of a large stored
// chunk is read holding its destination and a bounded window, never the
// whole chunk. The heap is measured by bench/heap_counter.cc, which replaces
// this binary's operator new / delete (every C++ allocation counted).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/dcp/dcp_format.h"
#include "format/dcp/item_index.h"
#include "format/format.h"
#include "heap_counter.h"
#include "io/checksum.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using bench::HeapLiveBytes;
using bench::HeapPeakBytes;
using bench::ResetHeapPeak;

constexpr int64_t kRows = 4096, kCols = 4096;  // f32: one 64 MiB chunk
constexpr uint64_t kChunkBytes = kRows * kCols * 4;
constexpr uint64_t kWindowBudget = 1 << 20;  // a read's staging beyond its destination

std::byte Pattern(uint64_t i) { return static_cast<std::byte>((i * 131 + 7) % 251); }

// A version 1 checkpoint (the one version whose chunks carry a single
// checksum: a part of one is verified by hashing the whole chunk): one
// tensor "w", f32 [4096, 4096], one chunk. `flip`: a payload byte changed
// after the checksum was taken.
void WriteV1(const std::string& dir, int64_t flip = -1) {
  std::string data(kChunkBytes, '\0');
  for (uint64_t i = 0; i < kChunkBytes; ++i) data[i] = static_cast<char>(Pattern(i));
  const std::string sum = ChecksumToHex(Checksum(std::as_bytes(std::span(data))));
  if (flip >= 0) data[flip] ^= 1;
  std::ofstream(dir + "/__0_0.bin", std::ios::binary) << data;
  std::ofstream(dir + "/metadata.json")
      << R"({"common": {}, "content": {}, "format": "native", "format_version": 1,
             "objects": {}, "topology": "tp=1", "writer": "staging_memory_test",
             "tensors": {"w": {"dtype": "f32", "global_shape": [4096, 4096], "chunks": [
               {"byte_offset": 0, "checksum": ")"
      << sum << R"(", "file": "__0_0.bin", "length": )" << kChunkBytes
      << R"(, "offset": [0, 0], "rank": 0, "shape": [4096, 4096]}]}}})";
}

// Reads rows [2048, 2049) and [3000, 3002) of "w" verified (kAlways: the
// chunk's one checksum is checked) and returns the heap's peak above what was
// live before, the destination's bytes included.
int64_t PartialReadPeak(const std::string& dir, std::vector<std::byte>& dst) {
  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(Env::Default(), dir);
  const StoredTensor& w = reader->metadata().tensors.at("w");
  const uint64_t row = kCols * 4;
  dst.assign(3 * row, std::byte{0});
  const std::vector<ReadRun> runs = {{2048 * row, row, dst.data()},
                                     {3000 * row, 2 * row, dst.data() + row}};
  const int64_t before = HeapLiveBytes();
  ResetHeapPeak();
  reader->ReadChunk(w, w.chunks[0], runs, VerifyPolicy::kAlways);
  return HeapPeakBytes() - before;
}

TEST(StagingMemoryTest, AVerifiedPartOfAVersion1ChunkStagesAWindowNotTheChunk) {
  ScopedTempDir tmp;
  WriteV1(tmp.path());
  std::vector<std::byte> dst;
  const int64_t peak = PartialReadPeak(tmp.path(), dst);
  RecordProperty("heap_peak_bytes", std::to_string(peak));
  // Before: a scratch buffer of the whole 64 MiB chunk.
  EXPECT_LT(peak, static_cast<int64_t>(kWindowBudget)) << "bytes staged for a 48 KiB part";
  const uint64_t row = kCols * 4;
  for (uint64_t i = 0; i < row; ++i) ASSERT_EQ(dst[i], Pattern(2048 * row + i)) << i;
  for (uint64_t i = 0; i < 2 * row; ++i) ASSERT_EQ(dst[row + i], Pattern(3000 * row + i)) << i;
}

TEST(StagingMemoryTest, TheWholeChunkIsStillHashed) {
  ScopedTempDir tmp;
  WriteV1(tmp.path(), /*flip=*/5);  // far from the rows read
  std::vector<std::byte> dst;
  EXPECT_THROW(PartialReadPeak(tmp.path(), dst), CheckpointError);
}

// The same part of a 64 MiB DCP item torch wrote (no item index: one CRC32
// for the whole record, so the whole record is hashed), read verified.
TEST(StagingMemoryTest, AVerifiedPartOfATorchWrittenDcpItemStagesAWindow) {
  ScopedTempDir tmp;
  std::string data(kChunkBytes, '\0');
  for (uint64_t i = 0; i < kChunkBytes; ++i) data[i] = static_cast<char>(Pattern(i));
  {
    Env* env = Env::Default();
    auto w = DcpFormat().NewWriter(env, tmp.path(), 0);
    w->WriteTensorChunk("w", DType::kF32, {kRows, kCols}, Box{{0, 0}, {kRows, kCols}}, std::nullopt,
                        Bytes(data));
    CheckpointMetadata md = w->Finish();
    md.format = "dcp";
    DcpFormat().Commit(env, tmp.path(), tmp.path(), md);
    // Cut where the items end, as torch writes the file.
    const std::filesystem::path file = tmp.path() + "/" + md.tensors.at("w").chunks[0].file;
    std::ifstream in(file, std::ios::binary);
    std::vector<std::byte> last(kDcpIndexTrailerBytes);
    in.seekg(-static_cast<std::streamoff>(last.size()), std::ios::end);
    in.read(reinterpret_cast<char*>(last.data()), static_cast<std::streamsize>(last.size()));
    auto trailer = ParseDcpIndexTrailer(last, std::filesystem::file_size(file), file.string());
    ASSERT_TRUE(trailer);
    std::filesystem::resize_file(file, trailer->items_end);
  }
  data = std::string();
  std::unique_ptr<CheckpointReader> reader = DcpFormat().OpenReader(Env::Default(), tmp.path());
  const StoredTensor& w = reader->metadata().tensors.at("w");
  const uint64_t row = kCols * 4;
  for (VerifyPolicy policy : {VerifyPolicy::kAlways, VerifyPolicy::kWhenWhole}) {
    std::vector<std::byte> dst(3 * row);
    const std::vector<ReadRun> runs = {{2048 * row, row, dst.data()},
                                       {3000 * row, 2 * row, dst.data() + row}};
    const int64_t before = HeapLiveBytes();
    ResetHeapPeak();
    reader->ReadChunk(w, w.chunks[0], runs, policy);
    const int64_t peak = HeapPeakBytes() - before;
    RecordProperty(
        policy == VerifyPolicy::kAlways ? "heap_peak_bytes_always" : "heap_peak_bytes_when_whole",
        std::to_string(peak));
    EXPECT_LT(peak, static_cast<int64_t>(kWindowBudget));
    for (uint64_t i = 0; i < row; ++i) ASSERT_EQ(dst[i], Pattern(2048 * row + i)) << i;
  }
}

}  // namespace
}  // namespace distckpt
