// Thread-backend steps for properties that go beyond what `distckpt run`
// does (resaving a loaded state, per-rank results, corrupting a checkpoint).
//
// Thread-safety: reentrant for distinct directories.
#ifndef DISTCKPT_PROPERTY_STEPS_H_
#define DISTCKPT_PROPERTY_STEPS_H_

#include <functional>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "scenario/spec.h"

namespace distckpt {

// Runs fn on `world` ranks (threads); the lowest failing rank's error
// ("rank 2: ..."), or nullopt.
std::optional<std::string> OnThreads(int world, const std::function<void(Communicator&)>& fn);

// Saves the scenario's generated state under `topology` into `dir`.
std::optional<std::string> SaveScenario(const Scenario& scenario, const std::string& topology,
                                        const std::string& dir);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_STEPS_H_
