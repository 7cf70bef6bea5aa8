// Property 1: for random states and random topologies A and B, saving under A
// and loading under B gives every element its expected value (threads
// backend, the path `distckpt run` takes).
#include <filesystem>

#include <gtest/gtest.h>

#include "property/generators.h"
#include "property/harness.h"
#include "property/reshard.h"

namespace distckpt {
namespace {

TEST(ReshardProperty, SaveUnderALoadUnderBGivesEveryElement) {
  const std::string work = MakeWorkDir();
  const GenLimits limits;
  CheckProperty({500, ReshardMinimums()}, [&] {
    const Scenario s = *GenReshardScenario(limits);
    Tag(ReshardClasses(s));
    CheckScenario(s, limits, [&](const Scenario& c) { return RunReshard(c, work); });
  });
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
