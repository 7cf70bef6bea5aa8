// Property 1 for optimizer state: a GPT model's parameters and Adam state in
// one of Megatron's four formats (plain, fully_reshardable,
// fully_sharded_model_space, dp_reshardable), saved under A and loaded under
// B, give every element its expected value (threads backend, the path
// `distckpt run` takes). The pair is a scenario file: a counterexample
// replays with `distckpt run FILE`.
#include <gtest/gtest.h>

#include <filesystem>

#include "property/generators.h"
#include "property/harness.h"
#include "property/optimizer_generators.h"
#include "property/reshard.h"

namespace distckpt {
namespace {

TEST(OptimizerProperty, SaveUnderALoadUnderBGivesEveryParameterAndOptimizerElement) {
  const std::string work = MakeWorkDir();
  const GenLimits limits;  // the shrinker keeps ModelsFit through ScenarioFits
  CheckProperty({150,
                 {{"plain", 0.10},
                  {"fully_reshardable", 0.10},
                  {"fully_sharded_model_space", 0.10},
                  {"dp_reshardable", 0.10},
                  {"tp-changing", 0.25},
                  {"pp-changing", 0.25},
                  {"dp-cp-changing", 0.30},
                  {"ep-changing", 0.10},
                  {"ep>1", 0.15},
                  {"vpp>1", 0.05},
                  {"moe", 0.25},
                  {"glu", 0.25},
                  {"tied", 0.10},
                  {"bucketed", 0.25},
                  {"pad-divisor-changing", 0.10},
                  {"world-size-changing", 0.40},
                  {"fsdp", 0.25},
                  {"fsdp-megatron", 0.12},
                  {"fsdp2", 0.12},
                  {"fsdp-layout-changing", 0.15},
                  {"hsdp", 0.04},
                  {"fsdp+tp", 0.10},
                  {"fsdp-experts", 0.06}}},
                [&] {
                  const Scenario s = *GenOptimizerScenario(limits.max_world);
                  Tag(OptimizerClasses(s));
                  CheckScenario(s, limits, [&](const Scenario& c) { return RunReshard(c, work); });
                });
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
