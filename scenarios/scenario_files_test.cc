// Runs every scenario file in scenarios/ with in-process ranks: each pair
// (or, without pairs, the whole topology matrix) must meet its expectation.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scenario/runner.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(DISTCKPT_SCENARIO_DIR)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ScenarioFileTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioFileTest, EveryPairMeetsItsExpectation) {
  Scenario scenario = Scenario::FromFile(GetParam());
  std::vector<PairResult> results = RunScenario(scenario, RunOptions{});
  ASSERT_FALSE(results.empty()) << GetParam() << " ran no pair";
  for (const PairResult& r : results) {
    EXPECT_TRUE(r.ok) << r.save << " -> " << r.load << ": " << r.reason;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioFileTest, ::testing::ValuesIn(ScenarioFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace distckpt
