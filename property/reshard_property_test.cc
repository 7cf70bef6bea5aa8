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

// The same with PyTorch DCP checkpoints (`distckpt run --format dcp`: Megatron's
// torch_dist layout, read back by our DCP reader).
TEST(ReshardProperty, DcpSaveUnderALoadUnderBGivesEveryElement) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.flatten_off_grid = false;  // unsupported by DCP (refused: dcp_format_test)
  CheckProperty({200, ReshardMinimums(), nullptr, "--format dcp"}, [&] {
    const Scenario s = *GenReshardScenario(limits);
    Tag(ReshardClasses(s));
    CheckScenario(s, limits, [&](const Scenario& c) { return RunReshard(c, work, "dcp"); });
  });
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
