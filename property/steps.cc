#include "property/steps.h"

#include <exception>

#include <fmt/format.h>

#include "comm/thread_world.h"
#include "scenario/runner.h"
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
                                        const std::string& dir) {
  std::optional<std::string> failure;
  const int world = Topology::Parse(topology).world_size();
  std::optional<std::string> thrown = OnThreads(world, [&](Communicator& comm) {
    StepReport r = SaveStep(scenario, nullptr, topology, dir, comm);
    if (comm.rank() == 0 && !r.ok) failure = fmt::format("save under {}: {}", topology, r.error);
  });
  return thrown ? thrown : failure;
}

}  // namespace distckpt
