// Property 1 (save under A, load under B gives every element its expected
// value) as one function per backend, shared by the default, slow and MPI
// runs, and the class minimums every run of it must reach.
//
// Thread-safety: RunReshard is reentrant for distinct work directories.
#ifndef DISTCKPT_PROPERTY_RESHARD_H_
#define DISTCKPT_PROPERTY_RESHARD_H_

#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/spec/spec.h"
#include "property/harness.h"

namespace distckpt {

// Runs the scenario's pairs as `distckpt run --format FORMAT` does (threads
// backend; the checkpoints go under `work_dir` and are removed); the first
// failing pair's reason, or nullopt.
std::optional<std::string> RunReshard(const Scenario& scenario, const std::string& work_dir,
                                      const std::string& format = "native");

// The same on the ranks of `world` (MPI): each step runs on the first
// world-size ranks of a sub-communicator, the others wait; every rank
// returns the same verdict. `work_dir` must be the same on every rank.
std::optional<std::string> RunReshardOn(Communicator& world, const Scenario& scenario,
                                        const std::string& work_dir);

// Interesting classes of property 1 and the share of cases each must reach.
std::vector<ClassMinimum> ReshardMinimums();

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_RESHARD_H_
