#include "core/little_endian.h"

#include <gtest/gtest.h>

#include <random>

namespace distckpt {
namespace {

// Against the byte-by-byte definition, for every width 0..12 and random
// values (widths past 8 pad with zeros; loads read the width's low bytes).
TEST(LittleEndianTest, AppendAndLoadMatchTheByteDefinition) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t value = rng() >> (rng() % 64);
    for (size_t width = 0; width <= 12; ++width) {
      std::string expected = "prefix";
      for (size_t i = 0; i < width; ++i) {
        expected += i < 8 ? static_cast<char>((value >> (8 * i)) & 0xff) : '\0';
      }
      std::string out = "prefix";
      AppendLittleEndian(out, value, width);
      ASSERT_EQ(out, expected) << value << " in " << width << " bytes";
      if (width <= 8) {
        const uint64_t mask = width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
        EXPECT_EQ(LoadLittleEndian(out.data() + 6, width), value & mask);
      }
    }
  }
  EXPECT_EQ(LoadLittleEndian("\x01\x02\x03\x04", 4), 0x04030201u);
}

}  // namespace
}  // namespace distckpt
