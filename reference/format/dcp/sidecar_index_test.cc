// Sidecar item indexes (sidecar_index.h) of a checkpoint Megatron's training
// loop wrote (torch's files): a partial read through one reads the tiles it
// touches, bit-exact to the whole-record read; a flipped data byte in a
// touched tile is refused naming the file and key; a stale or damaged
// sidecar is not used (the record is read whole and checked by its zip
// CRC32); beside and in the cache directory both found; a file resized since
// it was indexed into the cache is named in one warning.
#include "format/dcp/sidecar_index.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/little_endian.h"
#include "format/dcp/dcp_format.h"
#include "format/dcp/dcp_reader.h"
#include "format/dcp/testing.h"
#include "io/testing.h"

namespace distckpt {
namespace {

constexpr char kKey[] = "embedding.word_embeddings.weight";
constexpr char kNoSidecars[] = "/nonexistent/distckpt-dcp-test-sidecars";

// Every test of this binary reads the fixtures without the sidecars a user
// may have made of them in the default cache directory (`distckpt index
// fixtures/...`): their byte counts are those of torch's files.
const bool kNoUserSidecars = [] { return setenv("DISTCKPT_INDEX_DIR", kNoSidecars, 1) == 0; }();

class SidecarTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kNoUserSidecars);
    dir_ = tmp_.path() + "/ck";
    std::filesystem::copy(std::string(DISTCKPT_MEGATRON_RUNS) + "/gpt-default-tp2/iter_0000010",
                          dir_, std::filesystem::copy_options::recursive);
    cache_ = tmp_.path() + "/cache";
    std::filesystem::create_directories(cache_);
    std::filesystem::create_directories(tmp_.path() + "/empty");
    UseCache(cache_);
  }
  void TearDown() override { UseCache(kNoSidecars); }
  void UseCache(const std::string& dir) { setenv("DISTCKPT_INDEX_DIR", dir.c_str(), 1); }

  std::unique_ptr<CheckpointReader> Open() {
    return DetectFormat(Env::Default(), dir_).OpenReader(Env::Default(), dir_);
  }
  // `distckpt index`: every data file's sidecar, in the cache or beside it.
  void Index(bool beside) {
    std::unique_ptr<CheckpointReader> reader = Open();
    auto& dcp = dynamic_cast<DcpReader&>(*reader);
    for (const char* file : {"__0_0.distcp", "__1_0.distcp"}) {
      const std::string path = dir_ + "/" + file;
      uint64_t items = 0;
      const std::string index = dcp.BuildItemIndex(file, &items);
      ASSERT_GT(items, 0u);
      if (beside) {
        WriteFileBytes(DcpSidecarBeside(path), index);
      } else {
        WriteDcpSidecarCached(Env::Default(), cache_, path, std::filesystem::file_size(path),
                              index);
      }
    }
  }
  const StoredChunk& First(const StoredTensor& t) {
    for (const StoredChunk& c : t.chunks) {
      if (c.box.offset == Shape{0, 0}) return c;
    }
    throw std::runtime_error("no chunk at (0, 0)");
  }
  // Rows [64, 128) of the word embeddings' first chunk (rows [0, 128)): what
  // a tp=4 rank reads of it. `*read`: the reader's bytes_read.
  std::vector<std::byte> ReadHalf(uint64_t* read) {
    std::unique_ptr<CheckpointReader> reader = Open();
    const StoredTensor& t = reader->metadata().tensors.at(kKey);
    const StoredChunk& c = First(t);
    std::vector<std::byte> out(c.length / 2);
    const ReadRun run{c.length / 2, c.length / 2, out.data()};
    reader->ReadChunk(t, c, std::span(&run, 1), VerifyPolicy::kWhenWhole);
    *read = reader->stats().bytes_read;
    return out;
  }
  // The first data byte of the chunk's storage record (data/N of its item).
  uint64_t RecordOffset(std::string* file) {
    std::unique_ptr<CheckpointReader> reader = Open();
    const StoredChunk& c = First(reader->metadata().tensors.at(kKey));
    *file = dir_ + "/" + c.file;
    const std::string bytes = ReadFileBytes(*file);
    for (uint64_t at = c.offset;;) {
      EXPECT_EQ(bytes.substr(at, 4), std::string("PK\x03\x04", 4));
      const uint64_t flags = LoadLittleEndian(bytes.data() + at + 6, 2);
      const uint64_t n = LoadLittleEndian(bytes.data() + at + 26, 2);
      const uint64_t e = LoadLittleEndian(bytes.data() + at + 28, 2);
      const std::string name = bytes.substr(at + 30, n);
      const uint64_t data = at + 30 + n + e;
      if (name.find("/data/") != std::string::npos && !name.ends_with(".pkl")) return data;
      at = flags & 8 ? bytes.find(std::string("PK\x07\x08", 4), data) + 16
                     : data + LoadLittleEndian(bytes.data() + at + 18, 4);
    }
  }
  static void Flip(const std::string& path, uint64_t at) {
    std::string bytes = ReadFileBytes(path);
    bytes[at] ^= 1;
    WriteFileBytes(path, bytes);
  }

  ScopedTempDir tmp_;
  std::string dir_, cache_;
};

TEST_F(SidecarTest, PartialReadReadsTheTilesItNeedsBitExact) {
  UseCache(tmp_.path() + "/empty");
  uint64_t whole = 0;
  const std::vector<std::byte> expected = ReadHalf(&whole);
  UseCache(cache_);
  Index(false);
  uint64_t read = 0;
  EXPECT_EQ(ReadHalf(&read), expected);
  // Torch's record is read whole (and its headers); through the sidecar, the
  // half and a little index: its trailer, directory, a group, the record's
  // data descriptor.
  EXPECT_GE(whole, 2 * expected.size());
  EXPECT_LE(read, expected.size() + 1024) << "whole-record read: " << whole;
}

TEST_F(SidecarTest, BesideTheFileIsFoundToo) {
  Index(true);
  UseCache(tmp_.path() + "/empty");
  uint64_t read = 0;
  const std::vector<std::byte> half = ReadHalf(&read);
  EXPECT_LE(read, half.size() + 1024);
}

TEST_F(SidecarTest, FlippedByteInATouchedTileIsRefusedNamingFileAndKey) {
  Index(false);
  std::string file;
  const uint64_t data = RecordOffset(&file);
  Flip(file, data + 64 * 32 * 2 + 10);  // row 64: the half read
  uint64_t read = 0;
  try {
    ReadHalf(&read);
    FAIL() << "a flipped byte was read";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(kKey), std::string::npos) << e.what();
  }
}

TEST_F(SidecarTest, StaleRecordFallsBackToItsZipCrc) {
  Index(false);
  uint64_t read = 0;
  const std::vector<std::byte> expected = ReadHalf(&read);
  std::string file;
  const uint64_t data = RecordOffset(&file);
  // The record rewritten: a byte of the half not read and its CRC32 (data
  // descriptor, central directory), as a new save of that record would. The
  // tiles read still match; the record's descriptor no longer does.
  std::string bytes = ReadFileBytes(file);
  const uint64_t desc = bytes.find(std::string("PK\x07\x08", 4), data);
  const uint32_t old = static_cast<uint32_t>(LoadLittleEndian(bytes.data() + desc + 4, 4));
  bytes[data + 10] ^= 1;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + data), desc - data));
  auto put = [&](uint64_t at) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  };
  put(desc + 4);
  for (uint64_t cd = bytes.find(std::string("PK\x01\x02", 4), desc);; cd += 4) {
    cd = bytes.find(std::string("PK\x01\x02", 4), cd);
    ASSERT_NE(cd, std::string::npos);
    if (LoadLittleEndian(bytes.data() + cd + 16, 4) == old) {
      put(cd + 16);
      break;
    }
  }
  WriteFileBytes(file, bytes);
  EXPECT_EQ(ReadHalf(&read), expected);  // verified by the new CRC32
  EXPECT_GE(read, 2 * expected.size());  // the record whole
}

TEST_F(SidecarTest, AppendedFileOrDamagedSidecarIsNotUsed) {
  Index(true);
  UseCache(tmp_.path() + "/empty");
  uint64_t read = 0;
  const std::vector<std::byte> expected = ReadHalf(&read);
  std::string file;
  RecordOffset(&file);
  // Its directory damaged: the directory's xxHash3 in the trailer disagrees.
  const std::string sidecar = DcpSidecarBeside(file);
  std::string bytes = ReadFileBytes(sidecar);
  bytes[bytes.size() - 50] ^= 1;
  WriteFileBytes(sidecar, bytes);
  EXPECT_EQ(ReadHalf(&read), expected);
  EXPECT_GE(read, 2 * expected.size());
  // A sidecar of another size of the file (appended to since).
  Index(true);
  WriteFileBytes(file, ReadFileBytes(file) + "x");
  EXPECT_EQ(ReadHalf(&read), expected);
  EXPECT_GE(read, 2 * expected.size());
}

// A file grown (or shrunk) since it was indexed into the cache: its sidecar
// is keyed by the old size, so none is found; the size record under its path
// says why, once, naming the file (the record is read whole and verified, as
// without a sidecar). A cache without size records (older): no word.
TEST_F(SidecarTest, ResizedFileInTheCacheWarnsOnceNamingIt) {
  uint64_t read = 0;
  const std::vector<std::byte> expected = ReadHalf(&read);
  Index(false);
  std::string file;
  RecordOffset(&file);
  const std::string bytes = ReadFileBytes(file);
  ASSERT_EQ(ReadDcpSidecarSize(Env::Default(), cache_, file), bytes.size());
  // Grown by 5 bytes: one warning naming the file and both sizes.
  WriteFileBytes(file, bytes + "grown");
  testing::internal::CaptureStderr();
  EXPECT_EQ(ReadHalf(&read), expected);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_GE(read, 2 * expected.size());
  EXPECT_NE(err.find(fmt::format("warning: {}: {} bytes, {} when `distckpt index` indexed it", file,
                                 bytes.size() + 5, bytes.size())),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("rerun `distckpt index`"), std::string::npos) << err;
  // Once a process.
  testing::internal::CaptureStderr();
  EXPECT_EQ(ReadHalf(&read), expected);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // Back to its indexed size: through the sidecar again, no word.
  WriteFileBytes(file, bytes);
  testing::internal::CaptureStderr();
  EXPECT_EQ(ReadHalf(&read), expected);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_LE(read, expected.size() + 1024);
  // No size record (a cache written before them): not found, no word.
  std::filesystem::remove(DcpSidecarSizeRecord(cache_, file));
  WriteFileBytes(file, bytes + "x");
  testing::internal::CaptureStderr();
  EXPECT_EQ(ReadHalf(&read), expected);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_GE(read, 2 * expected.size());
}

}  // namespace
}  // namespace distckpt
