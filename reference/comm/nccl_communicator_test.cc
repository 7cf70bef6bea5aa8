// NcclCommunicator on a real CUDA device, as MPI processes (label gpu;
// skipped without a device): the conformance checks every backend passes,
// broadcasts of device memory in place, mixed host/device spans across
// ranks, and split groups.
#include "comm/nccl_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "comm/mpi_test_env.h"
#include "comm/testing.h"
#include "core/tensor.h"

namespace distckpt {
namespace {

Device MyDevice(const Communicator& comm) { return Device::Cuda(comm.rank() % CudaDeviceCount()); }

std::unique_ptr<Communicator> Nccl(Communicator& world) {
  return CreateNcclCommunicator(std::shared_ptr<Communicator>(world.Split(0, world.rank())),
                                MyDevice(world));
}

TEST(NcclCommunicatorTest, PassesTheConformanceChecks) {
  std::unique_ptr<Communicator> nccl = Nccl(MpiTestWorld());
  EXPECT_TRUE(nccl->device_memory());
  EXPECT_EQ(nccl->rank(), MpiTestWorld().rank());
  for (size_t length : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    ExpectBroadcastWorks(*nccl, length);  // host spans, through the device buffer
  }
  ExpectGatherWorks(*nccl, 1000);
  ExpectAllGatherWorks(*nccl, 1000);
  ExpectAllReduceWorks(*nccl, 100);
  ExpectSplitWorks(*nccl);
}

// Device memory moves in place; a rank may pass host memory while the others
// pass device memory (each span is what that rank has).
TEST(NcclCommunicatorTest, BroadcastsDeviceMemoryInPlace) {
  std::unique_ptr<Communicator> nccl = Nccl(MpiTestWorld());
  const Device device = MyDevice(*nccl);
  for (size_t length : {size_t{1}, size_t{4096}, size_t{64} << 20}) {
    for (int root = 0; root < nccl->size(); ++root) {
      const std::string expected = TestPayload(root, length, 3);
      std::string mine = nccl->rank() == root ? expected : std::string(length, 'x');
      Tensor host = Tensor::Wrap(mine.data(), DType::kU8, {static_cast<int64_t>(length)});
      const bool use_host = nccl->rank() == (root + 1) % nccl->size() && length == 4096;
      Tensor buffer = use_host ? host : host.To(device);
      nccl->BroadcastBytes({buffer.raw_data(), buffer.nbytes()}, root);
      Tensor back = buffer.To(Device::Cpu());
      EXPECT_TRUE(
          SameBytes(std::string(reinterpret_cast<const char*>(back.data()), length), expected))
          << "rank " << nccl->rank() << " root " << root << " length " << length
          << (use_host ? " (host span)" : "");
    }
  }
}

TEST(NcclCommunicatorTest, SplitGroupsGetTheirOwnNcclCommunicators) {
  std::unique_ptr<Communicator> nccl = Nccl(MpiTestWorld());
  std::unique_ptr<Communicator> half = nccl->Split(nccl->rank() % 2, nccl->rank());
  ASSERT_NE(half, nullptr);
  EXPECT_TRUE(half->device_memory());
  ExpectBroadcastWorks(*half, 4096);
}

}  // namespace
}  // namespace distckpt
