// Tests of the bounded JSON parse: deep nesting is refused before a parse,
// brackets in strings do not count, parse errors name the file.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "core/json_integer.h"

namespace distckpt {
namespace {

std::string Nested(size_t depth, const std::string& inner = "1") {
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += (i % 2 ? "{\"k\":" : "[");
  text += inner;
  for (size_t i = depth; i-- > 0;) text += (i % 2 ? "}" : "]");
  return text;
}

TEST(JsonParseTest, CountsNesting) {
  EXPECT_EQ(JsonNestingDepth("1"), 0u);
  EXPECT_EQ(JsonNestingDepth("[[1],{\"a\":[2]}]"), 3u);
  EXPECT_EQ(JsonNestingDepth(Nested(40)), 40u);
  // Brackets inside strings, escaped quotes included, are not nesting.
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[{{\"[[["})"), 1u);
  EXPECT_EQ(JsonNestingDepth(Nested(1000), 10), 11u);
}

TEST(JsonParseTest, ParsesUpToTheBound) {
  nlohmann::json j = ParseJson(Nested(kMaxJsonDepth), "f.json");
  EXPECT_TRUE(j.is_array());
  nlohmann::json copy = j;  // recursion at the bound fits the stack
  EXPECT_EQ(copy, j);
}

TEST(JsonParseTest, RefusesDeepNestingNamingTheFile) {
  // The probe's input: ~90,000 levels, which overflowed the stack in a copy.
  const std::string deep = "{\"common\":" + Nested(90000) + "}";
  EXPECT_THAT([&] { ParseJson(deep, "ckpt/metadata.json"); },
              ThrowsError(ErrorKind::kCorruption,
                          "ckpt/metadata.json: not valid JSON: arrays and objects nested deeper "
                          "than 512 levels"));
  EXPECT_THAT([&] { ParseJson(Nested(kMaxJsonDepth + 1), "f.json"); },
              ThrowsError(ErrorKind::kCorruption, "nested deeper"));
  EXPECT_THAT([&] { CheckJsonDepth(std::string(100000, '['), "g.json"); },
              ThrowsError(ErrorKind::kCorruption, "g.json"));
}

TEST(JsonParseTest, ParseErrorsNameTheFile) {
  EXPECT_THAT([&] { ParseJson("{\"a\":", "x/manifest.json"); },
              ThrowsError(ErrorKind::kCorruption, "x/manifest.json: not valid JSON"));
  EXPECT_THAT([&] { ParseJson("\"\xff\xfe\"", "bad_utf8.json"); },
              ThrowsError(ErrorKind::kCorruption, "bad_utf8.json: not valid JSON"));
  EXPECT_THAT([&] { ParseJson("1e999", "big.json"); },
              ThrowsError(ErrorKind::kCorruption, "big.json"));
}

TEST(JsonParseTest, ValidatesUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const char* bad : {"\xff", "\xc3", "a\xc3(", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xe2\x82"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
    // What nlohmann would have thrown on, naming nothing.
    EXPECT_THROW(nlohmann::json(std::string(bad)).dump(), nlohmann::json::type_error) << bad;
  }
}

// A literal past 2^64 parses as a float: get<T>() of it was undefined
// (UBSan, fuzz target manager_files, a manifest's "version").
TEST(JsonParseTest, IntegersAreCheckedForTypeAndRange) {
  nlohmann::json j = ParseJson(R"({"big": 222222222222222222221, "half": 1.5, "neg": -1,
                                   "max": 18446744073709551615, "v": [0, 2e56], "ok": 7})",
                               "n.json");
  EXPECT_EQ(JsonInteger<int>(j["ok"], "ok"), 7);
  EXPECT_EQ(JsonInteger<uint64_t>(j["max"], "max"), UINT64_MAX);
  EXPECT_EQ(JsonInteger<int64_t>(j["neg"], "neg"), -1);
  EXPECT_THAT([&] { JsonInteger<int64_t>(j["big"], "n.json: version"); },
              ThrowsError(ErrorKind::kCorruption, "n.json: version: 2.222222222222222"));
  EXPECT_THAT([&] { JsonInteger<int64_t>(j["big"], "n.json: version"); },
              ThrowsError(ErrorKind::kCorruption, "e+20 is not an integer of signed 64 bits"));
  EXPECT_THAT([&] { JsonInteger<int>(j["half"], "half"); },
              ThrowsError(ErrorKind::kCorruption, "half: 1.5 is not an integer"));
  EXPECT_THAT([&] { JsonInteger<uint64_t>(j["neg"], "neg"); },
              ThrowsError(ErrorKind::kCorruption, "unsigned 64 bits"));
  EXPECT_THAT([&] { JsonInteger<int64_t>(j["max"], "max"); },
              ThrowsError(ErrorKind::kCorruption, "signed 64 bits"));
  EXPECT_THAT([&] { JsonInteger<int32_t>(nlohmann::json(int64_t{1} << 40), "w"); },
              ThrowsError(ErrorKind::kCorruption, "signed 32 bits"));
  EXPECT_THAT([&] { JsonIntegers<uint64_t>(j["v"], "data_offsets"); },
              ThrowsError(ErrorKind::kCorruption, "data_offsets: 2e+56 is not"));
  EXPECT_THAT([&] { JsonIntegers<uint64_t>(j["ok"], "shape"); },
              ThrowsError(ErrorKind::kCorruption, "shape: 7 is not"));
}

}  // namespace
}  // namespace distckpt
