#include "format/dcp/torch_zip.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "core/error_testing.h"
#include "format/dcp/testing.h"

namespace distckpt {
namespace {

using namespace std::string_literals;

// Crc32 is zlib's crc32 (the zip format's), one shot and chained over any
// split, at every length around the kernels' strides (ISA-L folds 256 bytes
// at a time and finishes with a table) and at unaligned starts.
TEST(Crc32Test, EqualsZlibsCrc32ChainedOverAnySplit) {
  std::mt19937_64 rng(2026);
  std::vector<unsigned char> data(70000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t size : {0, 1, 15, 16, 17, 63, 64, 255, 256, 257, 1024, 4095, 4096, 65536, 69999}) {
    for (size_t start : {0, 1, 7}) {
      if (start + size > data.size()) continue;
      const auto bytes = std::as_bytes(std::span(data.data() + start, size));
      const uint32_t zlib = static_cast<uint32_t>(crc32(0, data.data() + start, size));
      EXPECT_EQ(Crc32(bytes), zlib) << size << " at " << start;
      const size_t cut = size ? rng() % size : 0;
      EXPECT_EQ(Crc32(bytes.subspan(cut), Crc32(bytes.first(cut))), zlib) << size << " cut " << cut;
    }
  }
}

// `streamed`: data/0 through AddStreamedRecord, in two pieces.
std::string Archive(bool zip64, bool streamed = false) {
  std::string out;
  ZipWriter zip(
      [&](std::span<const std::byte> b) {
        out.append(reinterpret_cast<const char*>(b.data()), b.size());
      },
      "archive", zip64,
      [&](uint64_t at, std::span<const std::byte> b) {
        std::memcpy(out.data() + at, b.data(), b.size());
      });
  zip.AddRecord("data.pkl", "\x80\x02K\x07."s);
  zip.AddRecord("byteorder", "little");
  const std::string data(1000, 'x');
  const auto bytes = std::as_bytes(std::span(data.data(), data.size()));
  if (streamed) {
    zip.AddStreamedRecord("data/0", data.size(), [&](const ZipWriter::Sink& sink) {
      sink(bytes.first(300));
      sink(bytes.subspan(300));
      return Crc32(bytes);
    });
  } else {
    zip.AddRecord("data/0", bytes);
  }
  zip.AddRecord("version", "3\n");
  zip.Finish();
  EXPECT_EQ(zip.size(), out.size());
  return out;
}

uint32_t U32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

TEST(ZipTest, RecordsReadBackAlignedWithTheirCrc) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64);
    const std::string bytes = Archive(zip64);
    ZipReader zip(bytes, "test.zip");
    EXPECT_EQ(zip.prefix(), "archive");
    ASSERT_EQ(zip.entries().size(), 4u);
    for (const ZipReader::Entry& e : zip.entries()) EXPECT_EQ(zip.DataOffset(e) % 64, 0u) << e.name;
    EXPECT_EQ(zip.ReadRecord(zip.Get("data/0")), std::string(1000, 'x'));
    EXPECT_EQ(zip.ReadRecord(zip.Get("version")), "3\n");
    EXPECT_EQ(zip.Get("data.pkl").crc, Crc32(std::as_bytes(std::span("\x80\x02K\x07.", 5))));
    EXPECT_EQ(zip.Find("missing"), nullptr);
    EXPECT_THAT([&] { zip.Get("missing"); },
                ThrowsError(ErrorKind::kCorruption, "no record 'missing'"));
  }
}

TEST(ZipTest, StreamedRecordsAreWrittenAsWhole) {
  for (bool zip64 : {false, true}) EXPECT_EQ(Archive(zip64, true), Archive(zip64)) << zip64;
}

TEST(ZipTest, Zip64WritesItsRecordsOnlyWhenNeeded) {
  const std::string plain = Archive(false);
  const std::string big = Archive(true);
  EXPECT_EQ(plain.find("PK\x06\x06"s), std::string::npos);
  EXPECT_NE(big.find("PK\x06\x06"s), std::string::npos);  // zip64 end record
  EXPECT_NE(big.find("PK\x06\x07"s), std::string::npos);  // and its locator
  EXPECT_EQ(U32(big, 18), 0xffffffffu);  // local header sizes defer to the extra field
  EXPECT_EQ(U32(plain, 18), 5u);
}

TEST(ZipTest, ReadsTorchsOwnFlavour) {
  // torch 2.6 (fixture): flags 0x0808, sizes only in the central directory,
  // data descriptors, zip64 end record even for tiny archives.
  const std::string file = ReadFileBytes(DcpFixture("torch-2.6/r1_file_per_item/__0_0.distcp"));
  ASSERT_EQ(file.substr(6, 2), "\x08\x08"s);
  ZipReader zip(file, "torch26");
  EXPECT_EQ(zip.prefix(), "archive");
  EXPECT_NE(zip.Find(".data/serialization_id"), nullptr);
  EXPECT_EQ(zip.ReadRecord(zip.Get("byteorder")), "little");
  EXPECT_EQ(zip.ReadRecord(zip.Get("version")), "3\n");
}

TEST(ZipTest, EveryTruncationIsCorruption) {
  const std::string bytes = Archive(false);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string cut = bytes.substr(0, n);
    EXPECT_THAT(
        [&] {
          ZipReader zip(cut, "cut.zip");
          for (const ZipReader::Entry& e : zip.entries()) zip.ReadRecord(e);
        },
        ThrowsError(ErrorKind::kCorruption, "cut.zip"))
        << n;
  }
}

TEST(ZipTest, FlippedBytesAreCaughtOrHarmless) {
  const std::string bytes = Archive(true);
  size_t caught = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    try {
      ZipReader zip(damaged, "flip.zip");
      for (const char* name : {"data.pkl", "data/0", "version"}) {
        EXPECT_EQ(zip.ReadRecord(zip.Get(name)),
                  ZipReader(bytes, "ok").ReadRecord(ZipReader(bytes, "ok").Get(name)));
      }
    } catch (const CheckpointError& e) {
      ++caught;
      EXPECT_THAT(e.what(), testing::HasSubstr("flip.zip"));
    }
  }
  EXPECT_GT(caught, bytes.size() / 2);
}

TEST(ZipTest, CompressedRecordsAreUnsupported) {
  std::string bytes = Archive(false);
  const size_t central = bytes.find("PK\x01\x02"s);
  bytes[central + 10] = 8;  // method: deflate
  ZipReader zip(bytes, "deflate.zip");
  EXPECT_THAT([&] { zip.ReadRecord(zip.entries()[0]); },
              ThrowsError(ErrorKind::kUnsupported, "compressed"));
}

}  // namespace
}  // namespace distckpt
