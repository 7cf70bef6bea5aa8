// ShardedTensor: one rank's piece of a global tensor, as in Megatron-Core's
// dist_checkpointing.mapping.ShardedTensor (see docs/megatron-semantics.md §1.1).
//
// `key` names the global tensor; (global_offset, local_shape) place the local
// chunk in it, `prepend_axis_num` leading global axes are absent locally (each
// of size 1 in the chunk), `axis_fragmentations` describes a regular grid
// (nullopt = uneven sharding), `replica_id` is all zeros for the one main
// replica that is written. With `flattened_range` the data is the 1-D slice
// [start, stop) of the row-major flattening of the local chunk.
//
// Thread-safety: value type; `data` shares storage on copy.
#ifndef DISTCKPT_MAPPING_SHARDED_TENSOR_H_
#define DISTCKPT_MAPPING_SHARDED_TENSOR_H_

#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/tensor.h"

namespace distckpt {

// Megatron's ReplicaId = int | tuple of ints; an int n is stored as {n}.
using ReplicaId = std::vector<int64_t>;
bool IsMainReplica(const ReplicaId& replica_id);
std::string ReplicaIdToString(const ReplicaId& replica_id);  // "0", "(0, 1, 2)"

// (axis, axis_rank_offset, axis_fragmentations) as in from_rank_offsets.
struct RankOffset {
  int64_t axis = 0;
  int64_t rank_offset = 0;
  int64_t fragments = 1;
};

struct ShardedTensor {
  std::string key;
  Tensor data;  // may be undefined (metadata only)
  DType dtype = DType::kF32;
  Shape local_shape;
  Shape global_shape;
  Shape global_offset;
  std::optional<Shape> axis_fragmentations;
  ReplicaId replica_id{0};
  int prepend_axis_num = 0;
  bool allow_shape_mismatch = false;
  std::optional<FlatRange> flattened_range;

  // Megatron's validate_metadata_integrity rules 1-7, same messages;
  // throws CheckpointError(kInvalidSharding).
  void ValidateMetadataIntegrity() const;
  // The rules that do not look at `data` (those metadata without data can break).
  void ValidateLayoutIntegrity() const;

  bool has_regular_grid() const { return axis_fragmentations.has_value(); }
  // The local chunk in global coordinates: prepended axes have size 1.
  Box GlobalBox() const;
  // Prepended offsets followed by global_offset[i] / local size, per axis.
  Shape LocalChunkOffsetInGlobal() const;
  // LocalChunkOffsetInGlobal()[axis], with its error, without building it.
  int64_t LocalChunkOffsetInGlobal(size_t axis) const;
  // Elements this shard holds (flattened range size, or chunk volume).
  int64_t LocalNumel() const;
  // The shape of `data`: (flattened range size,) or local_shape.
  Shape DataShape() const;
  ShardedTensor WithoutData() const;
  // Megatron's repr: ShardedTensor(key='k', dtype=..., local_shape=(..), global_shape=(..),
  // global_offset=(..), axis_fragmentations=(..), replica_id=.., prepend_axis_num=..,
  // allow_shape_mismatch=.., flattened_range=..)
  std::string ToString() const;

  // from_rank_offsets: see docs/megatron-semantics.md §1.1 "Constructors".
  static ShardedTensor FromRankOffsets(std::string key, Tensor data,
                                       const std::vector<RankOffset>& rank_offsets,
                                       ReplicaId replica_id = {0}, int prepend_axis_num = 0,
                                       bool allow_shape_mismatch = false);
  // Metadata-only variant (data undefined, dtype and local shape given).
  static ShardedTensor FromRankOffsetsMeta(std::string key, DType dtype, Shape local_shape,
                                           const std::vector<RankOffset>& rank_offsets,
                                           ReplicaId replica_id = {0}, int prepend_axis_num = 0,
                                           bool allow_shape_mismatch = false);
  static ShardedTensor FromRankOffsetsFlat(std::string key, Tensor data_1d,
                                           Shape non_flat_local_shape,
                                           const std::vector<RankOffset>& rank_offsets,
                                           FlatRange flattened_range, ReplicaId replica_id = {0},
                                           int prepend_axis_num = 0,
                                           bool allow_shape_mismatch = false);

  // Megatron's narrow(dim, start, length); dim excludes prepended axes.
  std::vector<ShardedTensor> Narrow(int64_t dim, int64_t start, int64_t length) const;
};

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_SHARDED_TENSOR_H_
