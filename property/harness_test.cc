// The harness's reporting contract (harness.h): every failing property prints
// its seed and leaves its report (and, when a scenario reproduces the case,
// the scenario file) under $DISTCKPT_PROPERTY_OUT, whatever way it failed.
// Each test runs a property that must fail and intercepts its GoogleTest
// failure.
#include "property/harness.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/expand/expand.h"
#include "harness/spec/spec.h"
#include "io/env.h"
#include "io/testing.h"
#include "property/generators.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

class PropertyHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("DISTCKPT_PROPERTY_OUT");
    if (old != nullptr) old_ = old;
    setenv("DISTCKPT_PROPERTY_OUT", out_.path().c_str(), 1);
  }
  void TearDown() override {
    if (old_) {
      setenv("DISTCKPT_PROPERTY_OUT", old_->c_str(), 1);
    } else {
      unsetenv("DISTCKPT_PROPERTY_OUT");
    }
  }

  // Runs `property` (which must fail once) and returns its failure message.
  template <typename Testable>
  std::string FailureOf(const PropertyOptions& options, Testable&& property) {
    ::testing::TestPartResultArray failures;
    {
      ::testing::ScopedFakeTestPartResultReporter intercept(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      CheckProperty(options, std::forward<Testable>(property));
    }
    EXPECT_EQ(failures.size(), 1);
    return failures.size() > 0 ? failures.GetTestPartResult(0).message() : "";
  }

  // The files written, by extension.
  std::vector<std::string> Written(const std::string& extension) const {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(out_.path())) {
      if (entry.path().extension() == extension) files.push_back(entry.path().string());
    }
    return files;
  }

  ScopedTempDir out_;
  std::optional<std::string> old_;
};

TEST_F(PropertyHarness, ACaseEndingInAnExceptionWritesItsScenario) {
  const std::string message = FailureOf({5}, [] {
    const Scenario s = *GenReshardScenario(GenLimits{});
    SetCase(s, "the damage");
    throw std::runtime_error("boom");
  });
  EXPECT_NE(message.find("unexpected exception std::runtime_error: boom"), std::string::npos)
      << message;
  EXPECT_NE(message.find("seed: "), std::string::npos) << message;
  EXPECT_NE(message.find("shrunk counterexample: " + out_.path()), std::string::npos) << message;
  ASSERT_EQ(Written(".json").size(), 1u) << message;
  const std::string json = ReadFileToString(Env::Default(), Written(".json")[0]);
  EXPECT_NE(json.find("\"description\": \"the damage\""), std::string::npos) << json;
  ASSERT_EQ(Written(".txt").size(), 1u);
  EXPECT_NE(ReadFileToString(Env::Default(), Written(".txt")[0]).find("boom"), std::string::npos);
}

// RapidCheck shrinks a FailCase failure (c > 0) to c = 0, which fails without
// a scenario: the scenario of the earlier, larger case must not be written
// as this failure's counterexample.
TEST_F(PropertyHarness, AFailureWithoutAScenarioWritesNoEarlierCasesScenario) {
  const std::string message = FailureOf({50}, [] {
    const Scenario s = *GenReshardScenario(GenLimits{});
    if (Choose(1000) == 0) RC_FAIL("no scenario");
    FailCase(s, "a scenario");
  });
  EXPECT_NE(message.find("no scenario"), std::string::npos) << message;
  EXPECT_NE(message.find("seed: "), std::string::npos) << message;
  EXPECT_TRUE(Written(".json").empty()) << message;
  EXPECT_EQ(Written(".txt").size(), 1u) << message;
}

TEST_F(PropertyHarness, AClassBelowItsMinimumPrintsTheSeedAndWritesAReport) {
  const std::string message = FailureOf({20, {{"never", 0.5}}}, [] { Tag({"always"}); });
  EXPECT_NE(message.find("class 'never' ran 0 of 20 cases"), std::string::npos) << message;
  EXPECT_NE(message.find("seed: "), std::string::npos) << message;
  ASSERT_EQ(Written(".txt").size(), 1u) << message;
  EXPECT_NE(ReadFileToString(Env::Default(), Written(".txt")[0]).find("class 'never'"),
            std::string::npos);
}

// Seed 105 of the corruption property: Fit halved the padded axis 0 of a
// tensor split over tp=6 down to 1, then dropped the padding, leaving an
// axis of 1 split evenly into 6 parts; the generator's own ExpandTensor then
// threw ("Exception while generating", before any scenario existed).
TEST(Generators, FitKeepsEvenSplitsDividingWhenItDropsThePadding) {
  TensorSpec t;
  t.key = "t0";
  t.shape = {250, 250};
  t.shard[0] = {MeshDim::kTp};
  t.pad_multiple = 8;
  t.flatten = MeshDim::kDp;
  GenLimits limits;
  limits.max_elements = 4;
  const std::vector<Topology> topos{Topology::Parse("tp=6"), Topology::Parse("tp=1,dp=2")};
  Fit(t, topos, limits);
  EXPECT_LE(Volume(t.shape), limits.max_elements);
  for (const Topology& topo : topos) {
    for (int r = 0; r < topo.world_size(); ++r) {
      EXPECT_NO_THROW(ExpandTensor(t, topo, r)) << topo.ToString() << " rank " << r;
    }
  }
  EXPECT_TRUE(FitsAsGenerated(t, topos, limits));
}

}  // namespace
}  // namespace distckpt
