// Property 1 under Open MPI (one process per rank, run by mpirun): every rank
// draws the same cases (rank 0's seed), each save and load runs on the first
// world-size ranks, and the ranks agree on every verdict, so RapidCheck
// shrinks identically everywhere; rank 0 writes the counterexample.
#include <gtest/gtest.h>

#include <filesystem>

#include "comm/mpi_test_env.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/reshard.h"

namespace distckpt {
namespace {

TEST(ReshardMpiProperty, SaveUnderALoadUnderBGivesEveryElement) {
  Communicator& world = MpiTestWorld();
  std::string work = world.rank() == 0 ? MakeWorkDir() : "";
  world.Broadcast(work, 0);
  GenLimits limits;
  limits.max_world = world.size();
  limits.max_elements = 512;
  CheckProperty({200, {{"world-size-changing", 0.2}, {"uneven", 0.03}}, &world}, [&] {
    const Scenario s = *GenReshardScenario(limits);
    Tag(ReshardClasses(s));
    CheckScenario(s, limits, [&](const Scenario& c) { return RunReshardOn(world, c, work); });
  });
  world.Barrier();
  if (world.rank() == 0) std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
