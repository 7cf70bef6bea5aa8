// The files beside verl's Megatron dist_ckpt/ that a reshard carries
// (format/verl/FORMAT.md, "Megatron backend"): after dist_ckpt/ is written
// under OUT_COMPONENT, the component's other entries (huggingface/,
// transformer_config.json, ...) are copied there, transformer_config.json with
// the new tensor / pipeline parallel sizes, and, when a whole step was given,
// the step's files (data.pt) into OUT_STEP; other components (sub-folders of
// the step) are not carried and are named in the returned notes. Everything
// goes through `env`, so it works on any storage (posix, s3://, MemoryEnv).
// The engine's save lock beside dist_ckpt/ is removed.
//
// Errors: CheckpointError from `env` naming the path. Thread-safety: one call
// per destination at a time.
#ifndef DISTCKPT_INTEROP_VERL_MEGATRON_CARRY_H_
#define DISTCKPT_INTEROP_VERL_MEGATRON_CARRY_H_

#include <string>
#include <vector>

#include "io/env.h"

namespace distckpt {

struct VerlMegatronPaths {
  std::string component, out_component;  // .../actor and its new copy
  std::string step, out_step;  // global_step_N and its copy ("" when a component was given)
};

std::vector<std::string> CarryVerlMegatronFiles(Env* env, const VerlMegatronPaths& paths, int tp,
                                                int pp);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_VERL_MEGATRON_CARRY_H_
