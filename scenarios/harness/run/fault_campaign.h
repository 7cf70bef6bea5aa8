// Fault-injection campaigns (leveldb style): run a save once to number its
// mutating file operations (io/crash_env.h), then, for every operation (or
// an even sample of them), restore the state before the save, run the save
// again crashing at that operation, optionally drop everything not yet
// durable (a power loss), and classify what a reader finds.
//
// The driver knows nothing of formats or strategies: a campaign is three
// callables, so any save path (engine strategies, local checkpoints, a
// checkpoint manager) can be driven by it:
//   prepare()   the file system before the save (the previous checkpoint
//               committed); called before every case
//   save(env)   the save under test, every file access through `env`; may
//               throw (it does when it crashes)
//   check()     what a reader finds afterwards (through Env::Default()):
//               the previous checkpoint, the new one, or a refusal; anything
//               else (wrong values, a previous checkpoint lost) is a
//               violation whose detail the report keeps
//   recover()   optional: after a refusal, what the next save must achieve
//               (e.g. the same save again, fault-free, then check() == kNew);
//               returns a violation detail or ""
//
// Thread-safety: RunFaultCampaign is reentrant for distinct directories.
#ifndef DISTCKPT_SCENARIO_FAULT_CAMPAIGN_H_
#define DISTCKPT_SCENARIO_FAULT_CAMPAIGN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/env.h"

namespace distckpt {

enum class FaultOutcome { kPrevious, kNew, kRefused, kViolation };

struct FaultCheck {
  FaultOutcome outcome = FaultOutcome::kViolation;
  std::string detail;  // why it is a violation, or the refusal's message
};

struct FaultCampaign {
  std::string name;  // prefixes report lines
  std::function<void()> prepare;
  std::function<void(Env* env)> save;
  std::function<FaultCheck()> check;
  std::function<std::string()> recover;  // may be empty
  // Scratch directory on the checkpoints' file system (io/crash_env.h trash).
  std::string trash_dir;
  bool crash = true;       // a crash case per point
  bool power_loss = true;  // a crash + power-loss case per point
  // Points to run: 0 = every operation, else this many spread evenly.
  int64_t sample = 0;
};

struct FaultCampaignReport {
  std::string name;
  int64_t points = 0;  // mutating operations of the fault-free save
  int64_t cases = 0;   // crash and power-loss cases run
  // "crash/previous", "power-loss/refused", ... -> cases
  std::map<std::string, int64_t> outcomes;
  std::vector<std::string> violations;  // "<name>: crash at <op>[+ power loss]: <detail>"
  std::string Summary() const;          // one line
};

FaultCampaignReport RunFaultCampaign(const FaultCampaign& campaign);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_FAULT_CAMPAIGN_H_
