// Property 1: for random states and random topologies A and B, saving under A
// and loading under B gives every element its expected value (threads
// backend, the path `distckpt run` takes).
#include <gtest/gtest.h>

#include <filesystem>

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
  // The main classes at about half their rates (300 cases: each well above its minimum).
  const std::vector<ClassMinimum> minimums{
      {"uneven", 0.05},      {"empty-shard", 0.03}, {"flattened", 0.10},
      {"padded", 0.05},      {"fp8", 0.10},         {"world-size-changing", 0.30},
      {"zero-volume", 0.03}, {"stacked", 0.10},     {"fsdp", 0.04}};
  CheckProperty({300, minimums, nullptr, "--format dcp"}, [&] {
    const Scenario s = *GenReshardScenario(limits);
    Tag(ReshardClasses(s));
    CheckScenario(s, limits, [&](const Scenario& c) { return RunReshard(c, work, "dcp"); });
  });
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
