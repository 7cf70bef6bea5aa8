#include "mapping/megatron_shard.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace distckpt {

ReplicaId MegatronReplicaId(const Topology& topology, int rank, bool tp_sharded) {
  const RankCoords at = topology.Coords(rank);
  return {0, tp_sharded ? 0 : at.tp, static_cast<int64_t>(at.dp) * topology.cp + at.cp};
}

ReplicaId MegatronExpertReplicaId(const Topology& topology, int rank, bool tp_sharded) {
  const RankCoords at = topology.Coords(rank);
  return {0, tp_sharded ? 0 : at.tp, at.edp};
}

ShardedTensor TensorParallelShard(std::string key, Tensor local, const Topology& topology, int rank,
                                  int tp_axis) {
  const bool sharded = tp_axis != kReplicatedOverTp;
  if (sharded && (tp_axis < 0 || static_cast<size_t>(tp_axis) >= local.shape().size())) {
    Fail(ErrorKind::kInvalidArgument, "{}: tp_axis {} is outside a tensor of {} axes", key, tp_axis,
         local.shape().size());
  }
  ReplicaId replica = MegatronReplicaId(topology, rank, sharded);
  std::vector<RankOffset> offsets;
  if (sharded) offsets.push_back({tp_axis, topology.Coords(rank).tp, topology.tp});
  return ShardedTensor::FromRankOffsets(std::move(key), std::move(local), offsets,
                                        std::move(replica));
}

}  // namespace distckpt
