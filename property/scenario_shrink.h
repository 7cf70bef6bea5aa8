// Schema-aware shrinking of a failing scenario, run after RapidCheck's own
// shrinking (which works on the generator's choices and can stop at a local
// minimum): greedily tries simpler scenarios, keeping one when every tensor
// still fits every topology as the generator would make it (GenLimits) and
// the check still fails. Simplifications, in order: drop a tensor or an
// object; each topology to tp=1, each parallel size to 1, ep / vpp to 1, the
// default rank order; per tensor: no load dtype, Megatron replica ids, no
// padding, jitter, flattening or chunk split, f32, one axis less sharded,
// smaller axes, the last unsharded axis removed; no FSDP layout (scenario,
// then each pair's load_fsdp); seed 1. Pairs are kept otherwise.
//
// Thread-safety: reentrant if `check` is.
#ifndef DISTCKPT_PROPERTY_SCENARIO_SHRINK_H_
#define DISTCKPT_PROPERTY_SCENARIO_SHRINK_H_

#include <functional>
#include <optional>
#include <string>

#include "harness/spec/spec.h"
#include "property/generators.h"

namespace distckpt {

// Why the scenario fails the property, or nullopt when it passes.
using ScenarioCheck = std::function<std::optional<std::string>(const Scenario&)>;

struct ShrinkResult {
  Scenario scenario;
  std::string failure;  // check(scenario)
  int runs = 0;         // checks run
  int steps = 0;        // simplifications kept
};

// `failing` must fail `check`. Runs `check` at most `max_runs` times.
ShrinkResult ShrinkScenario(const Scenario& failing, const std::string& failure,
                            const GenLimits& limits, const ScenarioCheck& check,
                            int max_runs = 400);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_SCENARIO_SHRINK_H_
