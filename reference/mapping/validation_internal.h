// Per-key pieces of ValidateShardingIntegrity (validation.h), shared by
// validation.cc (grouping, objects) and validation_tensor.cc (tensors).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MAPPING_VALIDATION_INTERNAL_H_
#define DISTCKPT_MAPPING_VALIDATION_INTERNAL_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mapping/sharded_tensor.h"

namespace distckpt {

struct RankTensor {
  int rank = 0;
  const ShardedTensor* tensor = nullptr;
};

// The error line for one key's ShardedTensors (all ranks), or nullopt when
// they are consistent and their main replicas cover the tensor exactly once.
// May throw CheckpointError for metadata that breaks ShardedTensor's rules.
std::optional<std::string> CheckTensorKey(std::span<const RankTensor> shards);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_VALIDATION_INTERNAL_H_
