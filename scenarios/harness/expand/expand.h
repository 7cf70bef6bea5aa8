// Expands a scenario into the sharded state dict each rank saves, the
// request each rank loads, and the check of what it loaded (per-tensor
// expansion: expand_tensor.h; per-rank state: rank_state.h).
//
// State dict layout: {"tensors": {path: ShardedTensor or ShardedTensorFactory},
// "objects": {path: ShardedObject}, "common": {"scenario": name, "seed": seed}}.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_EXPAND_H_
#define DISTCKPT_SCENARIO_EXPAND_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/load.h"
#include "format/checkpoint_metadata.h"
#include "harness/expand/expand_tensor.h"
#include "harness/expand/param.h"
#include "harness/expand/rank_state.h"
#include "harness/expand/values.h"
#include "harness/spec/spec.h"
#include "mapping/state_dict.h"
#include "topology/topology.h"

namespace distckpt {

// Rank `rank`'s state dict with generated values (and the pair's deliberate damage).
Node BuildSaveState(const Scenario& scenario, const PairSpec* pair, const Topology& topology,
                    int rank);
// The bytes of the tensors BuildSaveState makes for every rank of
// `topology` together (metadata only: no values are made), its "fp8"
// section's few test tensors aside; throws as BuildSaveState does when the
// topology cannot split a tensor.
uint64_t StateBytes(const Scenario& scenario, const Topology& topology);
// How BuildLoadRequest builds a request for a real checkpoint (verify,
// reshard): `stored_objects` (object key -> grid, from the checkpoint's
// metadata) replaces the scenario's expansion under the saved topology;
// `zero_fill` false leaves padded destinations uninitialised (a plan-only
// load never touches them).
struct RequestOptions {
  const std::map<std::string, Shape>* stored_objects = nullptr;
  bool zero_fill = true;
  bool objects = true;  // false: request tensors only (e.g. a checkpoint converted from HF)
  // An object stored on another grid of the same rank (verl's rng_state after
  // a TP/PP change, which verl's load requires): requested at its stored
  // coordinate (each offset modulo the stored grid) instead of left out;
  // `regridded` gets request path -> (grid, offset) under `topology`, for the
  // save to put back.
  bool regrid_objects = false;
  std::map<std::string, std::pair<Shape, Shape>>* regridded = nullptr;
};

// Rank `rank`'s load request: destination buffers allocated, load_extra
// added, load_drop removed; objects requested only when their grid is the
// same under both topologies (objects cannot be resharded); with
// `stored_objects`, only objects stored on the same grid.
Node BuildLoadRequest(const Scenario& scenario, const PairSpec* pair, const Topology& saved,
                      const Topology& topology, int rank, const RequestOptions& options = {});
// Object key -> grid (global_shape) of every object a checkpoint stores.
std::map<std::string, Shape> StoredObjectGrids(const CheckpointMetadata& metadata);
// Refuses to load a checkpoint whose optimizer format cannot follow the
// change of topology (dp_reshardable under other TP/PP), before anything is
// read; `saved_common` is the checkpoint's common state.
// The same refusal for whatever optimizer state a real checkpoint's common
// state records (Megatron's param_state_sharding_type; the saved TP, PP and
// EP from its args), whatever the request holds.
void CheckStoredOptimizerResumable(const nlohmann::json& common, const Topology& topo);
void CheckOptimizerLoadable(const Scenario& scenario, const Node& saved_common,
                            const Topology& topology);
// Checks every loaded tensor element and object; returns the first problem
// ("key 'w' element (3, 1) [index 16]: expected 1.5, got 0 (7 elements differ)").
std::optional<std::string> CheckLoaded(const Scenario& scenario, const PairSpec* pair,
                                       const Topology& saved, const Topology& topology, int rank,
                                       const LoadResult& loaded);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_EXPAND_H_
