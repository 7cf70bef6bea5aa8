#include "property/steps.h"

#include <fmt/format.h>

#include <exception>

#include "comm/thread_world.h"
#include "format/format.h"
#include "harness/expand/expand.h"
#include "harness/run/runner.h"
#include "mapping/dict_utils.h"
#include "topology/topology.h"

namespace distckpt {

std::optional<std::string> OnThreads(int world, const std::function<void(Communicator&)>& fn) {
  for (const RankOutcome& o : RunRanksCollect(world, fn)) {
    if (!o.error) continue;
    try {
      std::rethrow_exception(o.error);
    } catch (const std::exception& e) {
      return fmt::format("rank {}: {}", o.rank, e.what());
    }
  }
  return std::nullopt;
}

std::optional<std::string> SaveScenario(const Scenario& scenario, const std::string& topology,
                                        const std::string& dir, const std::string& format) {
  std::optional<std::string> failure;
  const int world = Topology::Parse(topology).world_size();
  const Format& f = FormatByName(format);
  std::optional<std::string> thrown = OnThreads(world, [&](Communicator& comm) {
    StepReport r = SaveStep(scenario, nullptr, topology, dir, comm, &f);
    if (comm.rank() == 0 && !r.ok) failure = fmt::format("save under {}: {}", topology, r.error);
  });
  return thrown ? thrown : failure;
}

namespace {

// The ShardedTensors of `state` that are not empty flattened ranges, without data.
std::vector<ShardedTensor> KeptShards(const Node& state) {
  std::vector<ShardedTensor> out;
  ForEachLeaf(state, [&](const NodePath&, const Node& leaf) {
    if (!leaf.is<ShardedTensor>()) return;
    const ShardedTensor& t = leaf.as<ShardedTensor>();
    if (!(t.flattened_range && t.flattened_range->size() == 0)) out.push_back(t.WithoutData());
  });
  return out;
}

}  // namespace

RankShards SavedShards(const Scenario& scenario, const PairSpec* pair, const Topology& topology) {
  RankShards ranks;
  for (int r = 0; r < topology.world_size(); ++r)
    ranks.push_back(KeptShards(BuildSaveState(scenario, pair, topology, r)));
  return ranks;
}

RankShards RequestedShards(const Scenario& scenario, const PairSpec* pair, const Topology& saved,
                           const Topology& load) {
  RankShards ranks;
  for (int r = 0; r < load.world_size(); ++r) {
    ranks.push_back(KeptShards(BuildLoadRequest(scenario, pair, saved, load, r)));
  }
  return ranks;
}

std::set<std::string> TensorKeys(const RankShards& ranks, int rank) {
  std::set<std::string> keys;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (rank >= 0 && static_cast<int>(r) != rank) continue;
    for (const ShardedTensor& t : ranks[r]) keys.insert(t.key);
  }
  return keys;
}

}  // namespace distckpt
