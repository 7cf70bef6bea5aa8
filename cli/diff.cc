// distckpt diff: two checkpoints compared in global space.
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "engine/checkpoint_diff.h"

namespace distckpt {

int DiffCommand(const std::string& a, const std::string& b, double atol, double rtol) {
  CheckpointDiff diff = DiffCheckpoints(a, b, {.atol = atol, .rtol = rtol});
  for (const std::string& key : diff.only_a) std::cout << fmt::format("only in {}: {}\n", a, key);
  for (const std::string& key : diff.only_b) std::cout << fmt::format("only in {}: {}\n", b, key);
  for (const std::string& line : diff.mismatches) std::cout << "differs: " << line << "\n";
  std::cout << fmt::format("{}: {} tensors ({} elements) and {} objects compared\n",
                           diff.identical() ? "identical" : "DIFFERENT", diff.tensors_compared,
                           diff.elements_compared, diff.objects_compared);
  return diff.identical() ? kExitOk : kExitVerdictFailed;
}

}  // namespace distckpt
