#include "engine/verl_convert.h"

#include "comm/thread_world.h"
#include "core/error.h"
#include "engine/save.h"

namespace distckpt {

Node VerlStateDict(const VerlRankState& state, int world, int rank) {
  Dict model;
  Dict optim_state;
  for (const ShardedTensor& t : state.tensors) {
    constexpr std::string_view kPrefix = "optimizer.state.";
    if (!t.key.starts_with(kPrefix)) {
      model[t.key] = Node(t);
      continue;
    }
    // "optimizer.state.<name>.<fqn>": grouped by name, then FQN.
    const std::string rest = t.key.substr(kPrefix.size());
    const size_t dot = rest.find('.');
    Node& by_name = optim_state[rest.substr(0, dot)];
    by_name.as<Dict>()[rest.substr(dot + 1)] = Node(t);
  }
  Dict root;
  root["model"] = Node(std::move(model));
  if (state.common.contains("optimizer")) {
    const nlohmann::json& o = state.common["optimizer"];
    Dict optimizer;
    optimizer["param_groups"] = Node(o["param_groups"]);
    for (const char* k : {"fsdp1_units", "fsdp1_align"}) {
      if (o.contains(k)) optimizer[k] = Node(o[k]);
    }
    for (const auto& [fqn, values] : o["state"].items()) {
      for (const auto& [name, value] : values.items()) {
        optim_state[name].as<Dict>()[fqn] = Node(value);
      }
    }
    optimizer["state"] = Node(std::move(optim_state));
    root["optimizer"] = Node(std::move(optimizer));
  }
  if (state.common.contains("extra_state")) {
    root["extra_state"] = Node(VerlExtraStateObject(state, world, rank));
  }
  return Node(std::move(root));
}

int ConvertVerlCheckpoint(const std::string& src, const std::string& dst,
                          const SaveOptions& options) {
  const int world = VerlWorldSize(src, options.env);
  // Read everything first: a bad rank file fails before anything is written.
  std::vector<VerlRankState> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(ReadVerlRank(src, world, r, options.env));
  ReconcileVerlRanks(ranks, src);
  std::vector<Node> states;
  for (int r = 0; r < world; ++r) states.push_back(VerlStateDict(ranks[r], world, r));
  RunRanks(world, [&](Communicator& comm) { Save(states[comm.rank()], dst, comm, options); });
  return world;
}

}  // namespace distckpt
