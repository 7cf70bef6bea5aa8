#include "format/native/json_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace distckpt {
namespace {

using nlohmann::json;

std::string Appended(const json& value) {
  std::string out = "prefix";
  AppendJson(value, out);
  return out;
}

TEST(JsonTextTest, MatchesDump) {
  const std::vector<json> values = {
      json(),
      true,
      false,
      0,
      -1,
      std::numeric_limits<int64_t>::min(),
      std::numeric_limits<int64_t>::max(),
      std::numeric_limits<uint64_t>::max(),
      1.5,
      -0.0,
      1e300,
      0.1,
      "",
      "plain ascii ~!",
      "quote \" and backslash \\",
      "tab\tnewline\ncontrol\x01 del\x7f",
      "utf-8 \xc3\xa9\xe2\x82\xac",
      json::array(),
      json::object(),
      json::parse(R"({"b":[1,-2,{"c":null}],"a":{"z":"y","e\"":3.25},"":[[]]})"),
      json::binary({1, 2, 3}),
  };
  for (const json& v : values) EXPECT_EQ(Appended(v), "prefix" + v.dump()) << v.dump();
}

TEST(JsonTextTest, StringsMatchDump) {
  for (const std::string s : {"", "k", "a/b.c", "x\"y", "\xe2\x82\xac", "\n"}) {
    std::string out;
    AppendJsonString(s, out);
    EXPECT_EQ(out, json(s).dump());
  }
}

TEST(JsonTextTest, InvalidUtf8ThrowsAsDumpDoes) {
  const json bad = std::string("\xff");
  EXPECT_THROW(bad.dump(), json::type_error);
  EXPECT_THROW(Appended(bad), json::type_error);
}

}  // namespace
}  // namespace distckpt
