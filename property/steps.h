// Thread-backend steps for properties that go beyond what `distckpt run`
// does (resaving a loaded state, per-rank results, corrupting a checkpoint).
//
// Thread-safety: reentrant for distinct directories.
#ifndef DISTCKPT_PROPERTY_STEPS_H_
#define DISTCKPT_PROPERTY_STEPS_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/spec/spec.h"
#include "mapping/sharded_tensor.h"
#include "topology/topology.h"

namespace distckpt {

// Runs fn on `world` ranks (threads); the lowest failing rank's error
// ("rank 2: ..."), or nullopt.
std::optional<std::string> OnThreads(int world, const std::function<void(Communicator&)>& fn);

// Saves the scenario's generated state under `topology` into `dir` in
// checkpoint format `format` (FormatByName).
std::optional<std::string> SaveScenario(const Scenario& scenario, const std::string& topology,
                                        const std::string& dir,
                                        const std::string& format = "native");

// Every rank's ShardedTensors (metadata only) as a save of the scenario
// under `topology` writes them / a load under `load` requests them: save and
// load drop shards whose flattened range is empty (Megatron's save / load
// preprocessing, docs/megatron-semantics.md §1.8), so those are left out.
using RankShards = std::vector<std::vector<ShardedTensor>>;
RankShards SavedShards(const Scenario& scenario, const PairSpec* pair, const Topology& topology);
RankShards RequestedShards(const Scenario& scenario, const PairSpec* pair, const Topology& saved,
                           const Topology& load);

// The keys of `ranks`' shards, over all ranks or on rank `rank` only: with
// SavedShards / RequestedShards, the tensor keys a save writes / a load
// requests (load_extra added, load_drop removed). A key whose every shard has
// an empty flattened range (a flattened tensor of no elements) is in neither.
std::set<std::string> TensorKeys(const RankShards& ranks, int rank = -1);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_STEPS_H_
