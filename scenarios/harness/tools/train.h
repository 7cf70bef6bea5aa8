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
// (optionally sleep step_ms), and save through the manager every
// save_interval steps and at the last step (Megatron saves at the end of
// training too); async saves are finalized lazily, then at the end.
//
// Non-persistent checkpoints (non_persistent_interval > 0, Megatron's
// --non-persistent-save-interval): at the multiples that are not a regular
// save, into ROOT/non_persistent/ through a second manager (transient: only
// the newest kept). `resume` "auto" takes whichever of the two trackers is
// newer, the non-persistent one on a tie (Megatron's load_checkpoint).
//
// Upload (options.manager.upload, manager/upload.h): each committed
// iteration is copied to the remote root in the background; its progress
// lines are logged at each step; the loop ends once the uploads are done,
// and fails (report.error) when the newest committed iteration could not be
// uploaded. "auto" resumes the remote tracker's iteration when it is newer.
//
// Stop on request (stop_requested set; Megatron's --exit-signal-handler):
// every rank calls it at every step and the ranks agree on it with one max
// all-reduce (every rank issues it, whatever it saw), so a signal any rank
// received stops them all at the same step: that step is saved (a regular,
// persistent save), pending async saves are finalized, and the loop returns
// with stop_signal set.
//
// Thread-safety: one call per rank; collective over `comm`.
#ifndef DISTCKPT_SCENARIO_TRAIN_H_
#define DISTCKPT_SCENARIO_TRAIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/spec/spec.h"
#include "manager/manager.h"

namespace distckpt {

struct TrainOptions {
  ManagerOptions manager;  // root, layout, components, contents, retention, async, topology...
  int64_t steps = 0;
  int64_t save_interval = 1;
  std::string resume;  // "" = start at step 0
  std::vector<std::string> load_contents = {"model", "optimizer", "extra"};
  int step_ms = 0;                      // simulated compute per step
  bool save_last = true;                // save the last step (--steps) too
  int64_t non_persistent_interval = 0;  // 0 = no non-persistent checkpoints
  // Called by every rank at every step when set: nonzero (a signal number)
  // asks the run to save and stop.
  std::function<int()> stop_requested;
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
  std::vector<int64_t> committed_non_persistent;
  std::vector<int64_t> uploaded;        // rank 0: iterations this run uploaded (manager.upload)
  bool resumed_non_persistent = false;  // the resumed checkpoint is ROOT/non_persistent's
  bool resumed_foreign = false;         // another tool wrote it: loaded whole, nothing trained
  int64_t last_step = 0;
  int stop_signal = 0;  // the (agreed) request that stopped the run, 0 = none
  std::string error;    // empty = ok (agreed by every rank)
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
