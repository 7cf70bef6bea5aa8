// Common (non-sharded) state <-> JSON, as stored in checkpoint metadata.
//
// Dicts become JSON objects and back; lists become arrays; JSON leaves are
// stored as they are. On the way back every JSON object becomes a Dict node,
// an array holding an object a List node (so a Megatron optimizer's
// `param_groups` list of dicts merges with the request's nonpersistent
// `params`), and everything else a JSON leaf (a list of plain values comes
// back as one JSON array leaf). Tensors and sharded leaves are not common state:
// CheckpointError(kUnsupported) naming the path.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_ENGINE_COMMON_STATE_H_
#define DISTCKPT_ENGINE_COMMON_STATE_H_

#include <nlohmann/json.hpp>

#include "mapping/state_dict.h"

namespace distckpt {

nlohmann::json CommonToJson(const Node& common);
Node CommonFromJson(const nlohmann::json& json);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_COMMON_STATE_H_
