// Expands a scenario into the sharded state dict each rank saves, the
// request each rank loads, and the check of what it loaded.
//
// State dict layout: {"tensors": {path: ShardedTensor or ShardedTensorFactory},
// "objects": {path: ShardedObject}, "common": {"scenario": name, "seed": seed}}. Replica ids
// follow Megatron's (PP, TP, DP) convention: each component is the rank's
// coordinate along mesh dims that do not split the tensor (the DP component
// covers cp and dp, or ep and edp for expert-sharded tensors).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_EXPAND_H_
#define DISTCKPT_SCENARIO_EXPAND_H_

#include <optional>
#include <string>
#include <vector>

#include "engine/load.h"
#include "mapping/state_dict.h"
#include "scenario/param.h"
#include "scenario/spec.h"
#include "scenario/values.h"
#include "topology/topology.h"

namespace distckpt {

// The shards of `spec` that `rank` holds (metadata only, no data). Throws
// CheckpointError(kInvalidArgument) when the topology cannot split the
// tensor ("tensor 'w' axis 0 of size 10 cannot be split evenly into
// tp*dp=4 parts"), before anything is written.
std::vector<ShardedTensor> ExpandTensor(const TensorSpec& spec, const Topology& topology, int rank);
ShardedObject ExpandObject(const ObjectSpec& spec, uint64_t seed, const Topology& topology, int rank);
// Where a shard's elements are in a logical tensor.
ShardLocation LocationOf(const Shape& logical_shape, const ShardedTensor& shard);

// Everything `rank` holds under `topology`: tensor specs and model
// generators (with `model_overrides` applied, e.g. a pair's load_model) and
// objects, and with an "optimizer" section the Adam state of the model
// generators' parameters (`optimizer_overrides`: a pair's load_optimizer).
// With an FSDP layout (the scenario's, or `fsdp_override`), tensor specs
// that are regular, unflattened, unpadded and not split over dp/cp/ep are
// re-sharded over DP x CP by that layout.
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

// Rank `rank`'s state dict with generated values (and the pair's deliberate damage).
Node BuildSaveState(const Scenario& scenario, const PairSpec* pair, const Topology& topology, int rank);
// Rank `rank`'s load request: destination buffers allocated, load_extra
// added, load_drop removed; objects requested only when their grid is the
// same under both topologies (objects cannot be resharded).
Node BuildLoadRequest(const Scenario& scenario, const PairSpec* pair, const Topology& saved,
                      const Topology& topology, int rank);
// Refuses to load a checkpoint whose optimizer format cannot follow the
// change of topology (dp_reshardable under other TP/PP), before anything is
// read; `saved_common` is the checkpoint's common state.
void CheckOptimizerLoadable(const Scenario& scenario, const Node& saved_common, const Topology& topology);
// Checks every loaded tensor element and object; returns the first problem
// ("key 'w' element (3, 1) [index 16]: expected 1.5, got 0 (7 elements differ)").
std::optional<std::string> CheckLoaded(const Scenario& scenario, const PairSpec* pair,
                                       const Topology& saved, const Topology& topology, int rank,
                                       const LoadResult& loaded);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_EXPAND_H_
