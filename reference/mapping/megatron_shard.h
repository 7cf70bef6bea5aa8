// Megatron-Core's tensor-parallel shards for a rank of a parallel layout,
// without building replica ids by hand: what a Megatron layer's
// sharded_state_dict gives a tensor (megatron-semantics §1: replica ids are
// (PP, TP, DP) tuples; a tensor split over TP has TP index 0 in it, one
// replicated over TP carries the rank's TP index; the DP index covers
// context parallelism too, as Megatron's data-parallel-with-CP group does;
// expert tensors use the expert-data-parallel index).
//
//   ShardedTensor w = TensorParallelShard("decoder.layers.mlp.linear_fc1.weight",
//                                         local, topology, rank, /*tp_axis=*/0);
//   ShardedTensor norm = TensorParallelShard("decoder.final_layernorm.weight",
//                                            local, topology, rank, kReplicatedOverTp);
//
// `local` is this rank's piece: its size along `tp_axis` times topology.tp
// is the global size (Megatron's even split; uneven splits need
// ShardedTensor::FromRankOffsets with offsets of their own). Errors:
// CheckpointError(kInvalidArgument) for a rank outside the topology or an
// axis outside the tensor.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MAPPING_MEGATRON_SHARD_H_
#define DISTCKPT_MAPPING_MEGATRON_SHARD_H_

#include <string>

#include "core/tensor.h"
#include "mapping/sharded_tensor.h"
#include "topology/topology.h"

namespace distckpt {

inline constexpr int kReplicatedOverTp = -1;

// (0, tp_sharded ? 0 : tp, dp * cp + cp-index): Megatron's dense replica id.
ReplicaId MegatronReplicaId(const Topology& topology, int rank, bool tp_sharded);
// (0, tp_sharded ? 0 : tp, edp): an expert tensor's (MoE layers under EP).
ReplicaId MegatronExpertReplicaId(const Topology& topology, int rank, bool tp_sharded);

// This rank's shard of a dense tensor: split along `tp_axis` over TP
// (kReplicatedOverTp: every TP rank holds it whole), Megatron's replica id.
ShardedTensor TensorParallelShard(std::string key, Tensor local, const Topology& topology, int rank,
                                  int tp_axis);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_MEGATRON_SHARD_H_
