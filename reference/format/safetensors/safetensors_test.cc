#include "format/safetensors/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "io/testing.h"

namespace distckpt {
namespace {

std::vector<std::byte> Iota(size_t n, int salt) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i * 7 + salt);
  return v;
}

std::string WriteExample(const std::string& dir) {
  std::string path = JoinPath(dir, "m.safetensors");
  SafetensorsWriter w(
      Env::Default(), path,
      {{"b", DType::kBF16, {3, 2}}, {"a.weight", DType::kF32, {5}}, {"empty", DType::kI64, {0}}},
      {{"format", "pt"}});
  auto b = Iota(12, 1), a = Iota(20, 2);
  w.Append(std::span(b).subspan(0, 5));  // pieces of any size, across tensors
  w.Append(std::span(b).subspan(5));
  w.Append(a);
  w.Finish();
  return path;
}

TEST(Safetensors, RoundTripAndLayout) {
  ScopedTempDir dir;
  std::string path = WriteExample(dir.path());
  std::string raw = ReadFileToString(Env::Default(), path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 32);
  EXPECT_THAT(raw.substr(8, n), ::testing::StartsWith(R"({"__metadata__":{"format":"pt"},"b":)"));
  SafetensorsFile f = OpenSafetensors(Env::Default(), path);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.entries.size(), 3u);
  const SafetensorsEntry* a = f.Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (Shape{5}));
  std::vector<std::byte> got(20);
  f.ReadTensor(*a, got);
  EXPECT_EQ(got, Iota(20, 2));
  EXPECT_FALSE(Env::Default()->FileExists(path + ".tmp"));
}

TEST(Safetensors, WriterRefusesMissingOrExtraBytes) {
  ScopedTempDir dir;
  std::string path = JoinPath(dir.path(), "x.safetensors");
  {
    SafetensorsWriter w(Env::Default(), path, {{"t", DType::kF32, {2}}});
    auto b = Iota(4, 0);
    w.Append(b);
    EXPECT_THAT([&] { w.Finish(); }, ThrowsError(ErrorKind::kInvalidArgument, "4 of 8"));
    auto more = Iota(8, 0);
    EXPECT_THAT([&] { w.Append(more); }, ThrowsError(ErrorKind::kInvalidArgument, "past"));
  }
  EXPECT_FALSE(Env::Default()->FileExists(path));
  EXPECT_FALSE(Env::Default()->FileExists(path + ".tmp"));
  EXPECT_THAT(
      [&] {
        SafetensorsWriter(Env::Default(), path, {{"t", DType::kF32, {1}}, {"t", DType::kF32, {1}}});
      },
      ThrowsError(ErrorKind::kInvalidArgument, "duplicate"));
}

void Damage(const std::string& path, const std::string& from, const std::string& to) {
  std::string raw = ReadFileToString(Env::Default(), path);
  size_t at = raw.find(from);
  ASSERT_NE(at, std::string::npos);
  raw.replace(at, from.size(), to);
  WriteFileAtomic(Env::Default(), path, raw);
}

TEST(Safetensors, DamagedHeadersAreCorruptionNamingTheFile) {
  ScopedTempDir dir;
  std::string path = WriteExample(dir.path());
  Damage(path, "\"BF16\"", "\"BX16\"");
  EXPECT_THAT([&] { OpenSafetensors(Env::Default(), path); },
              ThrowsError(ErrorKind::kCorruption, "'BX16'"));
  path = WriteExample(dir.path());
  Damage(path, "[3,2]", "[3,3]");
  EXPECT_THAT([&] { OpenSafetensors(Env::Default(), path); },
              ThrowsError(ErrorKind::kCorruption, "'b'"));
  path = WriteExample(dir.path());
  Damage(path, "[12,32]", "[14,32]");
  EXPECT_THAT([&] { OpenSafetensors(Env::Default(), path); },
              ThrowsError(ErrorKind::kCorruption, "m.safetensors"));
  path = WriteExample(dir.path());
  std::string raw = ReadFileToString(Env::Default(), path);
  WriteFileAtomic(Env::Default(), path, raw.substr(0, raw.size() - 1));
  EXPECT_THAT([&] { OpenSafetensors(Env::Default(), path); },
              ThrowsError(ErrorKind::kCorruption, "data section"));
  raw[0] = static_cast<char>(0xff);
  raw[7] = static_cast<char>(0x7f);
  WriteFileAtomic(Env::Default(), path, raw);
  EXPECT_THAT([&] { OpenSafetensors(Env::Default(), path); },
              ThrowsError(ErrorKind::kCorruption, "header length"));
}

}  // namespace
}  // namespace distckpt
