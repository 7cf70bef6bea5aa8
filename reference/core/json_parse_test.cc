// Tests of the bounded JSON parse: deep nesting is refused before a parse,
// brackets in strings do not count, parse errors name the file.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"

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

}  // namespace
}  // namespace distckpt
