#include "io/checksum.h"

#include <gtest/gtest.h>

#include "io/testing.h"

namespace distckpt {
namespace {

std::vector<std::byte> Pattern(size_t n) {
  std::vector<std::byte> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  return data;
}

TEST(ChecksumTest, KnownVectors) {
  // XXH3_64bits("") with seed 0, from the xxHash reference.
  EXPECT_EQ(Checksum({}), 0x2D06800538D394C2ull);
  EXPECT_EQ(ChecksumToHex(Checksum({})), "2d06800538d394c2");
  EXPECT_NE(Checksum(Pattern(1)), Checksum({}));
}

TEST(ChecksumTest, StreamingMatchesOneShotForAnySplit) {
  // Sizes straddle xxh3's internal block boundaries (16, 128, 240, 1024 bytes).
  for (size_t n : {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 5000}) {
    std::vector<std::byte> data = Pattern(n);
    const uint64_t expected = Checksum(data);
    for (size_t split : {size_t{0}, n / 3, n / 2, n}) {
      Checksummer streamed;
      streamed.Update(std::span(data).first(split));
      streamed.Update(std::span(data).subspan(split));
      EXPECT_EQ(streamed.Digest(), expected) << "n=" << n << " split=" << split;
    }
  }
}

TEST(ChecksumTest, FlippedByteChangesChecksum) {
  std::vector<std::byte> data = Pattern(1000);
  const uint64_t before = Checksum(data);
  data[500] ^= std::byte{1};
  EXPECT_NE(Checksum(data), before);
}

TEST(ChecksumTest, HexRoundTripAndStrictParse) {
  for (uint64_t v : {0ull, 1ull, 0x2D06800538D394C2ull, ~0ull}) {
    EXPECT_EQ(ChecksumToHex(v).size(), 16u);
    EXPECT_EQ(ChecksumFromHex(ChecksumToHex(v)), v);
  }
  EXPECT_EQ(ChecksumToHex(1), "0000000000000001");
  for (const char* bad : {"", "2d06800538d394c", "2d06800538d394c2a", "2D06800538D394C2",
                          "2d06800538d394g2", " d06800538d394c2"}) {
    EXPECT_THAT([&] { ChecksumFromHex(bad); },
                ThrowsError(ErrorKind::kCorruption, "malformed checksum"))
        << bad;
  }
}

}  // namespace
}  // namespace distckpt
