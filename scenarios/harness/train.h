// A simulated training loop over a scenario, checkpointed through the
// CheckpointManager (manager/manager.h): `distckpt train`.
//
// The state at step s is a pure function of (scenario, s, component):
//   model     — the scenario's state dict (tensors, models, objects,
//               optimizer section) generated with seed StepSeed(seed, s, component);
//   optimizer — Adam-like moments: the scenario's tensors and models again,
//               keys prefixed "optimizer.exp_avg.", with another seed;
//   extra     — common state: iteration, lr scheduler, consumed samples, rng seed.
// So every checkpoint's values are known without a reference copy: a resume
// under any topology checks every loaded element of every loaded content
// against the state of the resumed step.
//
// Loop: resume (options.resume: "" = none, "auto", a path or an iteration),
// check what was loaded, then for steps resumed+1 .. steps: "train"
// (optionally sleep step_ms), and every save_interval steps save through
// the manager (async saves are finalized lazily, then at the end).
//
// Thread-safety: one call per rank; collective over `comm`.
#ifndef DISTCKPT_SCENARIO_TRAIN_H_
#define DISTCKPT_SCENARIO_TRAIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/spec.h"
#include "manager/manager.h"

namespace distckpt {

struct TrainOptions {
  ManagerOptions manager;  // root, layout, components, contents, retention, async, topology...
  int64_t steps = 0;
  int64_t save_interval = 1;
  std::string resume;  // "" = start at step 0
  std::vector<std::string> load_contents = {"model", "optimizer", "extra"};
  int step_ms = 0;  // simulated compute per step
  // Rank 0's progress lines ("step 7", "committed 8"...).
  std::function<void(const std::string&)> log;
};

struct TrainReport {
  bool resumed = false;
  int64_t resumed_iteration = 0;
  std::string resumed_dir;
  std::string saved_topology;        // of the resumed checkpoint
  uint64_t elements_checked = 0;     // over all ranks, components and contents
  std::vector<std::string> ignored;  // incomplete directories seen at resume
  std::vector<int64_t> committed;    // iterations committed by this run
  int64_t last_step = 0;
  std::string error;  // empty = ok (agreed by every rank)
  bool value_mismatch = false;
};

uint64_t StepSeed(uint64_t seed, int64_t step, const std::string& component);
// The scenario generating `content` of `component` at `step`.
Scenario StepScenario(const Scenario& scenario, int64_t step, const std::string& component,
                      const std::string& content);
nlohmann::json ExtraStateAt(const Scenario& scenario, int64_t step, const std::string& component);

TrainReport TrainLoop(const Scenario& scenario, const TrainOptions& options, Communicator& comm);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_TRAIN_H_
