// What one rank holds under a topology: the scenario's tensor specs, model
// generators, optimizer state and objects, expanded to parameters (shard
// metadata, no data).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_RANK_STATE_H_
#define DISTCKPT_SCENARIO_RANK_STATE_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "harness/expand/param.h"
#include "harness/spec/spec.h"
#include "mapping/state_dict.h"
#include "topology/topology.h"

namespace distckpt {

// Everything `rank` holds under `topology`: tensor specs and model
// generators (with `model_overrides` applied, e.g. a pair's load_model) and
// objects, and with an "optimizer" section the Adam state of the model
// generators' parameters (`optimizer_overrides`: a pair's load_optimizer).
// With an FSDP layout (the scenario's, or `fsdp_override`), tensor specs
// that are regular, unflattened, unpadded and not split over dp/cp/ep, and
// every model generator's parameters (experts over the expert DP group),
// are re-sharded over the FSDP group (DP x CP, or its dp_shard part under
// HSDP) by that layout; the optimizer state then follows the sharded
// parameters (model-space formats only: the scenario parser refuses the
// others with fsdp).
// Throws CheckpointError(kInvalidArgument) naming the dimension when the
// topology cannot shard the state, before anything is written.
struct RankState {
  std::vector<Param> params;
  std::vector<ObjectParam> objects;
  Node optimizer;  // the optimizer's common state ("optimizer" at the root), when present
};
RankState ExpandRank(const Scenario& scenario, const Topology& topology, int rank,
                     const nlohmann::json& model_overrides = nullptr,
                     const nlohmann::json& optimizer_overrides = nullptr,
                     std::optional<FsdpLayout> fsdp_override = std::nullopt);

// True for the tensor specs an FSDP layout re-shards: regular (split: even),
// unflattened, unpadded, at least 1-d, split only over tp / pp and with
// (PP, TP, DP) replica ids (not `replica: flat`).
bool FsdpEligible(const TensorSpec& spec);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_RANK_STATE_H_
