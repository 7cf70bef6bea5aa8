// Tests of the Open MPI backend, run as 4 processes under mpirun: the same
// collective checks as the thread backend, chunked transfers (with a tiny
// message limit), Split/Subgroup and AgreeOnOutcome across processes.
#include "comm/mpi_communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/mpi_test_env.h"
#include "comm/testing.h"

namespace distckpt {
namespace {

constexpr size_t kLarge = 3 << 20;

// Lowers the per-call message limit for one test, so every payload above a
// few bytes takes several MPI calls.
class ScopedMessageLimit {
 public:
  explicit ScopedMessageLimit(size_t bytes) { SetMpiMaxMessageBytesForTesting(bytes); }
  ~ScopedMessageLimit() { SetMpiMaxMessageBytesForTesting(size_t{1} << 30); }
};

TEST(MpiCommunicatorTest, WorldMatchesMpirun) {
  ASSERT_TRUE(LaunchedByMpirun());
  Communicator& world = MpiTestWorld();
  EXPECT_EQ(world.size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(world.rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
}

// mpirun starts every test process on this machine: all of them are local.
TEST(MpiCommunicatorTest, RanksOnNodeMatchesMpirun) {
  Communicator& world = MpiTestWorld();
  EXPECT_EQ(world.ranks_on_node(), std::atoi(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")));
  EXPECT_EQ(world.ranks_on_node(), world.size());
  std::unique_ptr<Communicator> half = world.Split(world.rank() % 2, 0);
  EXPECT_EQ(half->ranks_on_node(), world.size());
}

TEST(MpiCommunicatorTest, Barrier) { ExpectBarrierWorks(MpiTestWorld()); }

TEST(MpiCommunicatorTest, Broadcast) {
  for (size_t length : {size_t{0}, size_t{1}, size_t{1000}, kLarge}) {
    ExpectBroadcastWorks(MpiTestWorld(), length);
  }
}

TEST(MpiCommunicatorTest, Gather) {
  for (size_t base : {size_t{0}, size_t{100}, kLarge}) ExpectGatherWorks(MpiTestWorld(), base);
}

TEST(MpiCommunicatorTest, AllGather) {
  for (size_t base : {size_t{0}, size_t{100}, kLarge}) ExpectAllGatherWorks(MpiTestWorld(), base);
}

TEST(MpiCommunicatorTest, AllReduce) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
    ExpectAllReduceWorks(MpiTestWorld(), count);
  }
}

TEST(MpiCommunicatorTest, ChunkedTransfers) {
  ScopedMessageLimit limit(7);
  Communicator& world = MpiTestWorld();
  ExpectBroadcastWorks(world, 1000);
  ExpectGatherWorks(world, 1000);
  ExpectAllGatherWorks(world, 1000);
  ExpectAllReduceWorks(world, 100);
}

TEST(MpiCommunicatorTest, Split) { ExpectSplitWorks(MpiTestWorld()); }

TEST(MpiCommunicatorTest, Subgroup) { ExpectSubgroupWorks(MpiTestWorld()); }

TEST(MpiCommunicatorTest, SubCommunicatorCollectives) {
  Communicator& world = MpiTestWorld();
  std::unique_ptr<Communicator> half = world.Split(world.rank() % 2, world.rank());
  ASSERT_NE(half, nullptr);
  ExpectBroadcastWorks(*half, 100);
  ExpectGatherWorks(*half, 100);
  ExpectAllGatherWorks(*half, 100);
  ExpectAllReduceWorks(*half, 10);
}

TEST(MpiCommunicatorTest, AgreeOnOutcome) {
  Communicator& world = MpiTestWorld();
  ExpectAgreeOnOutcomeWorks(world, {});
  ExpectAgreeOnOutcomeWorks(world, {2});
  ExpectAgreeOnOutcomeWorks(world, {1, world.size() - 1});
}

TEST(MpiCommunicatorTest, BroadcastRejectsBadRoot) {
  Communicator& world = MpiTestWorld();
  std::string bytes;
  try {
    world.Broadcast(bytes, world.size());
    ADD_FAILURE() << "accepted root " << world.size();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace distckpt
