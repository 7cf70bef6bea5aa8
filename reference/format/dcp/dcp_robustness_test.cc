// Bad input never crashes: a malicious .metadata, truncated or damaged
// files, stream transforms. Every failure is a CheckpointError naming the
// file; nothing is executed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "format/dcp/dcp_format.h"
#include "format/dcp/dcp_metadata.h"
#include "format/dcp/pickler.h"
#include "format/dcp/testing.h"

namespace distckpt {
namespace {

constexpr const char* kFixture = "torch-2.6/r2_sharded";

// Reads every tensor and object; true when all of them hold the fixture's values.
bool ReadsCorrectly(const std::string& dir) {
  auto reader = DcpFormat().OpenReader(Env::Default(), dir);
  nlohmann::json expected =
      nlohmann::json::parse(ReadFileBytes(DcpFixture(kFixture) + "/expected.json"));
  for (const auto& [key, t] : reader->metadata().tensors) {
    std::vector<std::byte> data = ReadGlobal(*reader, t);
    for (size_t i = 0; i < static_cast<size_t>(Volume(t.global_shape)); ++i) {
      if (!ElementEquals(data, t.dtype, i, expected["tensors"][key]["values"])) return false;
    }
  }
  return reader->metadata().common == nlohmann::json({{"step", 11}});
}

TEST(DcpRobustnessTest, MaliciousMetadataIsRefusedAndNothingRuns) {
  ScopedTempDir tmp;
  const std::string marker = tmp.path() + "/pwned";
  // .metadata = os.system("touch <marker>"), the classic pickle payload.
  PickleWriter w;
  w.Reduce([&] { w.Global("os", "system"); }, 1, [&] { w.Str("touch " + marker); });
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture(kFixture), dir);
  WriteFileBytes(dir + "/.metadata", w.Finish());
  EXPECT_EQ(DetectFormat(Env::Default(), dir).name(), "dcp");
  EXPECT_THAT([&] { DcpFormat().OpenReader(Env::Default(), dir); },
              ThrowsError(ErrorKind::kUnsupported,
                          dir + "/.metadata: refusing to unpickle global 'os.system'"));
  EXPECT_NE(::access(marker.c_str(), F_OK), 0);
}

TEST(DcpRobustnessTest, EveryTruncatedMetadataIsCorruptionNamingIt) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture(kFixture), dir);
  const std::string full = ReadFileBytes(dir + "/.metadata");
  for (size_t n = 0; n < full.size(); ++n) {
    WriteFileBytes(dir + "/.metadata", full.substr(0, n));
    EXPECT_THAT([&] { DcpFormat().OpenReader(Env::Default(), dir); },
                ThrowsError(ErrorKind::kCorruption, dir + "/.metadata"))
        << n;
  }
}

TEST(DcpRobustnessTest, TruncatedDataFilesNameTheFile) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture(kFixture), dir);
  const std::string full = ReadFileBytes(dir + "/__0_0.distcp");
  for (size_t n = 0; n < full.size(); n += 61) {
    WriteFileBytes(dir + "/__0_0.distcp", full.substr(0, n));
    EXPECT_THAT([&] { ReadsCorrectly(dir); },
                ThrowsError(ErrorKind::kCorruption, dir + "/__0_0.distcp"))
        << n;
  }
  std::filesystem::remove(dir + "/__0_0.distcp");
  EXPECT_THAT([&] { ReadsCorrectly(dir); },
              ThrowsError(ErrorKind::kCorruption, "__0_0.distcp is missing"));
}

TEST(DcpRobustnessTest, FlippedBytesAreCaughtOrHarmless) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture(kFixture), dir);
  ASSERT_TRUE(ReadsCorrectly(dir));
  for (const char* file : {"__0_0.distcp", "__1_0.distcp"}) {
    const std::string path = dir + "/" + file;
    const std::string good = ReadFileBytes(path);
    size_t caught = 0;
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x20);
      WriteFileBytes(path, bad);
      try {
        EXPECT_TRUE(ReadsCorrectly(dir)) << file << " byte " << i << " changed a value undetected";
      } catch (const CheckpointError& e) {
        ++caught;
        EXPECT_THAT(e.what(), testing::HasSubstr(path)) << i;
      }
    }
    WriteFileBytes(path, good);
    EXPECT_GT(caught, good.size() / 4) << file;
  }
}

// .metadata whose chunks overlap or leave a gap is refused on open, naming
// it (PyTorch's planner deduplicates chunks before writing them).
TEST(DcpRobustnessTest, ChunksThatDoNotTileTheirTensorAreRefusedOnOpen) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture(kFixture), dir);
  const DcpMetadata good = DecodeDcpMetadata(ReadFileBytes(dir + "/.metadata"), "md");
  DcpMetadata md = good;
  auto entry = std::find_if(md.entries.begin(), md.entries.end(),
                            [](const DcpEntry& e) { return e.fqn == "row_f32"; });
  ASSERT_NE(entry, md.entries.end());
  ASSERT_EQ(entry->chunks.size(), 2u);
  // Rows [0:3] and [3:5] of (5, 4); chunk 1 moved up a row, with its storage key.
  ASSERT_EQ(entry->chunks[1].offsets, (Shape{3, 0}));
  for (DcpStorage& s : md.storage) {
    if (s.fqn == "row_f32" && s.offset == entry->chunks[1].offsets) s.offset = Shape{2, 0};
  }
  entry->chunks[1].offsets = {2, 0};
  WriteFileBytes(dir + "/.metadata", EncodeDcpMetadata(md));
  EXPECT_THAT([&] { DcpFormat().OpenReader(Env::Default(), dir); },
              ThrowsError(ErrorKind::kCorruption,
                          dir + "/.metadata: tensor 'row_f32': stored chunks[0] [0:3, 0:4] (file "
                                "__0_0.distcp, rank 0) and chunks[1] [2:4, 0:4] (file "
                                "__1_0.distcp, rank 1) overlap in [2:3, 0:4]"));
  md = good;
  entry = std::find_if(md.entries.begin(), md.entries.end(),
                       [](const DcpEntry& e) { return e.fqn == "row_f32"; });
  entry->chunks.pop_back();
  WriteFileBytes(dir + "/.metadata", EncodeDcpMetadata(md));
  EXPECT_THAT([&] { DcpFormat().OpenReader(Env::Default(), dir); },
              ThrowsError(ErrorKind::kIncomplete,
                          dir + "/.metadata: tensor 'row_f32': elements [3:5, 0:4] of global shape "
                                "(5, 4) are in no stored chunk"));
}

TEST(DcpRobustnessTest, StreamTransformsAreUnsupported) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture("raw-stdlib/target-2.x"), dir);
  DcpMetadata md = DecodeDcpMetadata(ReadFileBytes(dir + "/.metadata"), "md");
  md.storage[1].transforms = {"stream.zstd/1"};  // row_f32's first chunk
  WriteFileBytes(dir + "/.metadata", EncodeDcpMetadata(md));
  auto reader = DcpFormat().OpenReader(Env::Default(), dir);
  const StoredTensor& t = reader->metadata().tensors.at("row_f32");
  EXPECT_THAT([&] { ReadGlobal(*reader, t); },
              ThrowsError(ErrorKind::kUnsupported, "stream transforms [stream.zstd/1]"));
  EXPECT_NO_THROW(ReadGlobal(*reader, reader->metadata().tensors.at("rep_i64")));
}

TEST(DcpRobustnessTest, ItemsThatContradictMetadataAreCorruption) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  CopyDir(DcpFixture("raw-stdlib/target-2.x"), dir);
  DcpMetadata md = DecodeDcpMetadata(ReadFileBytes(dir + "/.metadata"), "md");
  std::swap(md.storage[1], md.storage[2]);  // row_f32's chunk now points at rep_bf16's item
  std::swap(md.storage[1].fqn, md.storage[2].fqn);
  std::swap(md.storage[1].offset, md.storage[2].offset);
  WriteFileBytes(dir + "/.metadata", EncodeDcpMetadata(md));
  auto reader = DcpFormat().OpenReader(Env::Default(), dir);
  EXPECT_THAT(
      [&] { ReadGlobal(*reader, reader->metadata().tensors.at("row_f32")); },
      ThrowsError(ErrorKind::kCorruption,
                  "holds a bfloat16 tensor of size (6,), .metadata expects float32 (3, 4)"));
}

}  // namespace
}  // namespace distckpt
