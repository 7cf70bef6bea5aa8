#include "harness/run/damage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/error_testing.h"
#include "harness/run/runner.h"
#include "io/env.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / fs::path("distckpt-damage-" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteFileAtomic(Env::Default(), dir_ + "/a.bin", std::string("abcdef"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(DamageTest, SetsOneByteOrTruncates) {
  EXPECT_EQ(ApplyDamage({"a.bin", 2, 'X', std::nullopt}, dir_),
            "set byte 2 of a.bin (6 bytes) from 0x63 to 0x58");
  EXPECT_EQ(ReadFileToString(Env::Default(), dir_ + "/a.bin"), "abXdef");
  EXPECT_EQ(ApplyDamage({"a.bin", 0, 0, 4}, dir_), "truncate a.bin from 6 to 4 bytes");
  EXPECT_EQ(ReadFileToString(Env::Default(), dir_ + "/a.bin"), "abXd");
}

TEST_F(DamageTest, RefusesWhatTheFileDoesNotHaveNamingIt) {
  EXPECT_THAT(
      [&] {
        ApplyDamage({"b.bin", 0, 1, std::nullopt}, dir_);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "b.bin is not a file of the checkpoint"));
  EXPECT_THAT(
      [&] {
        ApplyDamage({"a.bin", 6, 1, std::nullopt}, dir_);
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "byte 6 is beyond the end of " + dir_ + "/a.bin (6 bytes)"));
  EXPECT_THAT(
      [&] {
        ApplyDamage({"a.bin", 0, 0, 7}, dir_);
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "cannot truncate " + dir_ + "/a.bin (6 bytes) to 7"));
  EXPECT_EQ(ReadFileToString(Env::Default(), dir_ + "/a.bin"), "abcdef");  // untouched
}

// "expect": "loaded_or_refused" passes a refusal and fails wrong values:
// the same flipped byte, read with checksums (refused) and without (loaded wrong).
TEST(DamagedPairTest, LoadedOrRefusedFailsOnWrongValuesOnly) {
  Scenario s = Scenario::FromJson(nlohmann::json::parse(R"({"tensors": [{"key": "w", "shape": [4]}],
      "pairs": [{"save": "tp=1", "load": "tp=1", "damage": {"file": "__0_0.bin", "at": 1, "value": 255},
                 "expect": "loaded_or_refused", "verify": "always"},
                {"save": "tp=1", "load": "tp=1", "damage": {"file": "__0_0.bin", "at": 1, "value": 255},
                 "expect": "loaded_or_refused", "verify": "never"},
                {"save": "tp=1", "load": "tp=1", "damage": {"file": "__0_0.bin", "truncate": 0},
                 "expect": "loaded_or_refused"},
                {"save": "tp=1", "load": "tp=1", "damage": {"file": "__9_0.bin", "truncate": 0}}]})"),
                                  "t.json");
  const std::vector<PairResult> r = RunScenario(s, RunOptions{});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[0].ok) << r[0].reason;
  EXPECT_THAT(r[0].reason, HasSubstr("refused: rank 0: checksum mismatch in"));
  EXPECT_FALSE(r[1].ok);
  EXPECT_THAT(r[1].reason, HasSubstr("loaded wrong values: key 'w' element"));
  EXPECT_TRUE(r[2].ok) << r[2].reason;
  EXPECT_THAT(r[2].reason, HasSubstr("is truncated"));
  EXPECT_FALSE(r[3].ok);
  EXPECT_THAT(r[3].reason, HasSubstr("__9_0.bin is not a file of the checkpoint"));
}

}  // namespace
}  // namespace distckpt
