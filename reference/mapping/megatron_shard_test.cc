#include "mapping/megatron_shard.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

TEST(MegatronShardTest, ReplicaIdsAreMegatronsPpTpDp) {
  const Topology t = Topology::Parse("tp=2,cp=2,dp=2,pp=2");
  for (int rank = 0; rank < t.world_size(); ++rank) {
    const RankCoords at = t.Coords(rank);
    EXPECT_EQ(MegatronReplicaId(t, rank, /*tp_sharded=*/true),
              (ReplicaId{0, 0, at.dp * 2 + at.cp}));
    EXPECT_EQ(MegatronReplicaId(t, rank, /*tp_sharded=*/false),
              (ReplicaId{0, at.tp, at.dp * 2 + at.cp}));
  }
  const Topology moe = Topology::Parse("dp=4,ep=2");
  EXPECT_EQ(MegatronExpertReplicaId(moe, 3, true), (ReplicaId{0, 0, moe.Coords(3).edp}));
  EXPECT_THAT([&] { MegatronReplicaId(t, 16, true); }, ThrowsError(ErrorKind::kInvalidArgument));
}

TEST(MegatronShardTest, TensorParallelShardSplitsAlongItsAxis) {
  const Topology t = Topology::Parse("tp=4,dp=2");
  // Rank 6: tp 2, dp 1. A column-parallel (axis 0) piece of 3 rows of a 12-row weight.
  ShardedTensor w = TensorParallelShard("w", Tensor::Zeros(DType::kF32, {3, 8}), t, 6, 0);
  EXPECT_EQ(w.global_shape, (Shape{12, 8}));
  EXPECT_EQ(w.GlobalBox().offset, (Shape{6, 0}));
  EXPECT_EQ(w.replica_id, (ReplicaId{0, 0, 1}));
  // A row-parallel (axis 1) piece.
  ShardedTensor r = TensorParallelShard("r", Tensor::Zeros(DType::kF32, {8, 3}), t, 6, 1);
  EXPECT_EQ(r.global_shape, (Shape{8, 12}));
  EXPECT_EQ(r.GlobalBox().offset, (Shape{0, 6}));
  // Replicated over TP: whole, the TP index in the replica id (main replica on tp 0, dp 0 only).
  ShardedTensor n =
      TensorParallelShard("n", Tensor::Zeros(DType::kF32, {8}), t, 6, kReplicatedOverTp);
  EXPECT_EQ(n.global_shape, (Shape{8}));
  EXPECT_EQ(n.replica_id, (ReplicaId{0, 2, 1}));
  EXPECT_FALSE(IsMainReplica(n.replica_id));
  EXPECT_TRUE(IsMainReplica(
      TensorParallelShard("n", Tensor::Zeros(DType::kF32, {8}), t, 0, kReplicatedOverTp)
          .replica_id));
  EXPECT_THAT([&] { TensorParallelShard("x", Tensor::Zeros(DType::kF32, {8}), t, 0, 1); },
              ThrowsError(ErrorKind::kInvalidArgument));
}

}  // namespace
}  // namespace distckpt
