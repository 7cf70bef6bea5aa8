// Global sharding validation for save and load (engine-internal): every
// rank's shard metadata is gathered on the coordinator (rank 0), which runs
// ValidateShardingIntegrity (mapping/validation.h); every rank receives the
// verdict, so either all ranks throw (kInvalidSharding, the coordinator's
// message) or none does. The coordinator validates its own metadata as it
// is, without the JSON round trip the other ranks' metadata takes.
//
// Thread-safety: collective; one call per rank.
#ifndef DISTCKPT_ENGINE_GLOBAL_VALIDATION_H_
#define DISTCKPT_ENGINE_GLOBAL_VALIDATION_H_

#include "comm/communicator.h"
#include "mapping/state_dict.h"

namespace distckpt {

void ValidateGlobalSharding(const Node& sharded, Communicator& comm);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_GLOBAL_VALIDATION_H_
