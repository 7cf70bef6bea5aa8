// Converting verl's per-rank FSDP files (format/verl/verl_files.h) into a
// distckpt checkpoint: the W saved ranks become W ranks of a thread world,
// each saving its state dict {"model": {<fqn>: shard}, "optimizer": {"state":
// {<name>: {<fqn>: shard}}, ...common}, "extra_state": per-rank object}
// under the keys verl_files.h gives, so the result loads under any other
// world size (FSDP2 rows, whole tensors, ...) by chunk overlap.
//
// Hugging Face export of the result (manager's exporter, issue 16) plugs in
// after this: it reads the model keys of the converted checkpoint.
//
// Thread-safety: one call at a time per destination.
#ifndef DISTCKPT_ENGINE_VERL_CONVERT_H_
#define DISTCKPT_ENGINE_VERL_CONVERT_H_

#include <string>

#include "engine/options.h"
#include "format/verl/verl_files.h"
#include "mapping/state_dict.h"

namespace distckpt {

// Rank `rank`'s state dict as the conversion saves it.
Node VerlStateDict(const VerlRankState& state, int world_size, int rank);

// Reads every rank of the verl checkpoint in `src` and saves it to `dst`
// (options.format: native by default, or DCP). Returns the world size read.
// Throws CheckpointError naming the file and key; nothing is committed then.
int ConvertVerlCheckpoint(const std::string& src, const std::string& dst,
                          const SaveOptions& options = {});

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_VERL_CONVERT_H_
