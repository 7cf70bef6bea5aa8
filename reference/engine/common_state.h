// Common (non-sharded) state <-> JSON, as stored in checkpoint metadata.
//
// Dicts become JSON objects and back; lists become arrays; JSON leaves are
// stored as they are. On the way back every JSON object becomes a Dict node
// and everything else a JSON leaf (so a list of plain values comes back as
// one JSON array leaf). Tensors and sharded leaves are not common state:
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
