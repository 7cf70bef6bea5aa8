// A scenario pair's "damage": one byte of a file of the committed checkpoint
// changed, or the file truncated, between the save and the load — so the
// corruption property's counterexamples replay with `distckpt run`.
//
// Thread-safety: ApplyDamage writes the file; call it from one thread.
#ifndef DISTCKPT_SCENARIO_DAMAGE_H_
#define DISTCKPT_SCENARIO_DAMAGE_H_

#include <string>

#include "harness/spec/spec.h"

namespace distckpt {

// Applies `damage` to the file it names in checkpoint directory `dir`
// (written atomically: a rename of a complete copy) and describes it ("set
// byte 293 of metadata.json (1201 bytes) from 0x30 to 0x31"). Throws
// CheckpointError(kInvalidArgument) naming the file when it does not exist,
// or the byte or the length lies beyond its end.
std::string ApplyDamage(const DamageSpec& damage, const std::string& dir);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_DAMAGE_H_
