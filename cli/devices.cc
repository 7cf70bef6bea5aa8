// distckpt devices: how many CUDA devices this build and machine have.
#include <iostream>

#include "cli/commands.h"
#include "core/device.h"  // internal: the CUDA probe this report prints

namespace distckpt {

Command AddDevicesCommand(CLI::App& app) {
  CLI::App* devices = app.add_subcommand(
      "devices", "print how many CUDA devices this build and machine have (0: none)");
  return {devices, [](CommandLine&) {
            std::cout << CudaDeviceCount() << " CUDA device(s)"
                      << (CudaSimulated() ? " (simulated: DISTCKPT_SIMULATE_CUDA)"
                          : CudaBuilt()   ? ""
                                          : " (this build has no CUDA support)")
                      << "\n";
            return kExitOk;
          }};
}

}  // namespace distckpt
