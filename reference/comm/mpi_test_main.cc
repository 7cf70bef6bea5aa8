// main() of the MPI GoogleTest binaries: one process per rank runs every
// test, then the ranks agree on the verdict (all pass or all fail, so mpirun
// and ctest see the same exit code everywhere). Rank 0 prints gtest's usual
// output; other ranks print only their failures, prefixed "[rank R]".
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_communicator.h"
#include "comm/mpi_test_env.h"
#include "core/device.h"

namespace distckpt {
namespace {

std::unique_ptr<Communicator> world;

// Reports a non-zero rank's failed assertions and tests.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_,
                result.file_name() ? result.file_name() : "unknown file", result.line_number(),
                result.message());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::printf("[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    std::fflush(stdout);
  }

 private:
  const int rank_;
};

}  // namespace

Communicator& MpiTestWorld() { return *world; }

}  // namespace distckpt

int main(int argc, char** argv) {
#ifdef DISTCKPT_GPU_TEST
  // gpu-labelled MPI tests: every rank sees the same machine, so every rank
  // exits 77 (ctest: skipped) without a device, before MPI starts.
  if (distckpt::CudaDeviceCount() == 0) {
    std::printf("SKIPPED: %s\n", distckpt::CudaBuilt() ? "no CUDA device on this machine"
                                                       : "this build has no CUDA support");
    return 77;
  }
#endif
  distckpt::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  distckpt::world = distckpt::MpiWorld();
  const int rank = distckpt::world->rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new distckpt::RankFailurePrinter(rank));
  }
  const bool passed = RUN_ALL_TESTS() == 0;
  const bool all_passed =
      distckpt::world->AllReduceOne(passed ? 1 : 0, distckpt::ReduceOp::kMin) == 1;
  if (rank == 0 && passed && !all_passed) {
    std::printf("[rank 0] tests failed on other ranks (see their [rank R] lines)\n");
  }
  distckpt::world.reset();
  return all_passed ? 0 : 1;
}
