// main() of the gpu-labelled GoogleTest binaries (cmake distckpt_gpu_test):
// without a CUDA device (or a CUDA build) they print why and exit 77, which
// ctest reports as skipped.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
  if (distckpt::CudaDeviceCount() == 0) {
    std::printf("SKIPPED: %s\n", distckpt::CudaBuilt() ? "no CUDA device on this machine"
                                                       : "this build has no CUDA support");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
