// ShardedTensor: metadata integrity rules, constructors from rank offsets,
// narrowing and Megatron's repr (docs/megatron-semantics.md §1.1, §1.2).
#include "mapping/sharded_tensor.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "mapping/py_format.h"

namespace distckpt {

bool IsMainReplica(const ReplicaId& replica_id) {
  return std::all_of(replica_id.begin(), replica_id.end(), [](int64_t r) { return r == 0; });
}

std::string ReplicaIdToString(const ReplicaId& replica_id) {
  if (replica_id.size() == 1) return std::to_string(replica_id[0]);
  return ShapeToString(replica_id);
}

namespace {

std::string FlatRangeToString(const std::optional<FlatRange>& range) {
  if (!range) return "None";
  return fmt::format("slice({}, {}, None)", range->start, range->stop);
}

// Number of elements of a 1-D tensor of `volume` elements sliced with
// [start:stop] (Python clamps both bounds).
int64_t PySliceLength(int64_t volume, const FlatRange& range) {
  const int64_t start = std::clamp<int64_t>(range.start, 0, volume);
  const int64_t stop = std::clamp<int64_t>(range.stop, 0, volume);
  return std::max<int64_t>(0, stop - start);
}

std::string RankOffsetsToString(const std::vector<RankOffset>& rank_offsets) {
  std::vector<std::string> items;
  for (const RankOffset& r : rank_offsets) {
    items.push_back(ShapeToString({r.axis, r.rank_offset, r.fragments}));
  }
  return PyTuple(items);
}

// from_rank_offsets on a chunk of `local_shape`; `data` may be undefined.
ShardedTensor BuildFromRankOffsets(std::string key, Tensor data, DType dtype, Shape local_shape,
                                   const std::vector<RankOffset>& rank_offsets,
                                   ReplicaId replica_id, int prepend_axis_num,
                                   bool allow_shape_mismatch) {
  const int64_t ndim = static_cast<int64_t>(local_shape.size()) + prepend_axis_num;
  Shape global_offset(ndim, 0);
  Shape global_shape(prepend_axis_num, 1);
  global_shape.insert(global_shape.end(), local_shape.begin(), local_shape.end());
  Shape fragmentations(ndim, 1);
  for (const RankOffset& r : rank_offsets) {
    // Megatron raises IndexError for an axis past the tensor's rank; we
    // report it like the other invalid offsets. Duplicate axes: last wins.
    if (r.axis < 0 || r.rank_offset < 0 || r.fragments < 1 || r.rank_offset >= r.fragments ||
        r.axis >= ndim) {
      Fail(ErrorKind::kInvalidSharding, "Invalid rank offsets: {} for key {}.",
           RankOffsetsToString(rank_offsets), key);
    }
    const int64_t local = r.axis < prepend_axis_num ? 1 : local_shape[r.axis - prepend_axis_num];
    global_shape[r.axis] = r.fragments * local;
    global_offset[r.axis] = r.rank_offset * local;
    fragmentations[r.axis] = r.fragments;
  }
  ShardedTensor t;
  t.key = std::move(key);
  t.data = std::move(data);
  t.dtype = dtype;
  t.local_shape = std::move(local_shape);
  t.global_shape = std::move(global_shape);
  t.global_offset = std::move(global_offset);
  t.axis_fragmentations = std::move(fragmentations);
  t.replica_id = std::move(replica_id);
  t.prepend_axis_num = prepend_axis_num;
  t.allow_shape_mismatch = allow_shape_mismatch;
  return t;
}

}  // namespace

void ShardedTensor::ValidateMetadataIntegrity() const {
  if (data.defined()) {
    if (data.dtype() != dtype) {
      Fail(ErrorKind::kInvalidSharding, "Data dtype should match `dtype` attribute for {}",
           ToString());
    }
    if (!flattened_range && data.shape() != local_shape) {
      Fail(ErrorKind::kInvalidSharding, "Data shape should match `local_shape` attribute for {}",
           ToString());
    }
    if (flattened_range) {
      if (data.ndim() != 1) {
        Fail(ErrorKind::kInvalidSharding, "Data should be 1D for a flattened {}", ToString());
      }
      const int64_t expected = PySliceLength(Volume(local_shape), *flattened_range);
      if (data.numel() != expected) {
        Fail(ErrorKind::kInvalidSharding, "Data shape {} doesnt match expected {} for {}",
             ShapeToString(data.shape()), ShapeToString({expected}), ToString());
      }
    }
  }
  ValidateLayoutIntegrity();
}

void ShardedTensor::ValidateLayoutIntegrity() const {
  if (global_shape.size() != global_offset.size()) {
    Fail(ErrorKind::kInvalidSharding,
         "Global offset dimensions should be equal to global shape dimensions for {}", ToString());
  }
  if (prepend_axis_num < 0 || local_shape.size() + prepend_axis_num != global_shape.size()) {
    Fail(ErrorKind::kInvalidSharding,
         "Local shape together with `prepend_axis_num` dimensions should be equal to global "
         "shape dimensions for {}",
         ToString());
  }
  if (has_regular_grid()) {
    for (size_t i = 0; i < local_shape.size(); ++i) {
      const int64_t off = global_offset[prepend_axis_num + i];
      const int64_t sh = local_shape[i];
      if (sh != 0 && off % sh != 0) {
        Fail(ErrorKind::kInvalidSharding,
             "Global offset ({}) must be divisible by local shape ({}) for {}.", off, sh,
             ToString());
      }
    }
  }
  // Rule 7 (a `step` in the flattened range) cannot be expressed by FlatRange;
  // rule 8 (the flattened_range deprecation warning) is not reproduced.
  // Megatron slices a meta tensor, so an out-of-bounds range without data
  // slips through; we reject it (deliberately stricter).
  if (flattened_range &&
      (flattened_range->start < 0 || flattened_range->start > flattened_range->stop ||
       flattened_range->stop > Volume(local_shape))) {
    Fail(ErrorKind::kInvalidSharding,
         "Flattened range {} is out of bounds of local shape {} for {}",
         FlatRangeToString(flattened_range), ShapeToString(local_shape), ToString());
  }
}

Box ShardedTensor::GlobalBox() const {
  Shape shape(prepend_axis_num, 1);
  shape.insert(shape.end(), local_shape.begin(), local_shape.end());
  return Box{global_offset, shape};
}

Shape ShardedTensor::LocalChunkOffsetInGlobal() const {
  Shape chunk(prepend_axis_num + local_shape.size());
  for (size_t axis = 0; axis < chunk.size(); ++axis) chunk[axis] = LocalChunkOffsetInGlobal(axis);
  return chunk;
}

int64_t ShardedTensor::LocalChunkOffsetInGlobal(size_t axis) const {
  const size_t prepend = static_cast<size_t>(prepend_axis_num);
  if (axis < prepend) return global_offset[axis];
  const int64_t off = global_offset[axis];
  const int64_t sh = local_shape[axis - prepend];
  if (sh == 0 || off % sh != 0) {
    Fail(ErrorKind::kInvalidSharding,
         "Global offset ({}) must be divisible by local shape ({}) for {}.", off, sh, ToString());
  }
  return off / sh;
}

int64_t ShardedTensor::LocalNumel() const {
  return flattened_range ? flattened_range->size() : Volume(local_shape);
}

Shape ShardedTensor::DataShape() const {
  return flattened_range ? Shape{flattened_range->size()} : local_shape;
}

ShardedTensor ShardedTensor::WithoutData() const {
  ShardedTensor copy = *this;
  copy.data = Tensor();
  return copy;
}

std::string ShardedTensor::ToString() const {
  return fmt::format(
      "ShardedTensor(key={}, dtype={}, local_shape={}, global_shape={}, global_offset={}, "
      "axis_fragmentations={}, replica_id={}, prepend_axis_num={}, allow_shape_mismatch={}, "
      "flattened_range={})",
      PyRepr(key), DTypeName(dtype), ShapeToString(local_shape), ShapeToString(global_shape),
      ShapeToString(global_offset),
      axis_fragmentations ? ShapeToString(*axis_fragmentations) : "None",
      ReplicaIdToString(replica_id), prepend_axis_num, allow_shape_mismatch ? "True" : "False",
      FlatRangeToString(flattened_range));
}

ShardedTensor ShardedTensor::FromRankOffsets(std::string key, Tensor data,
                                             const std::vector<RankOffset>& rank_offsets,
                                             ReplicaId replica_id, int prepend_axis_num,
                                             bool allow_shape_mismatch) {
  const DType dtype = data.dtype();
  Shape local_shape = data.shape();
  ShardedTensor t = BuildFromRankOffsets(
      std::move(key), std::move(data), dtype, std::move(local_shape), rank_offsets,
      std::move(replica_id), prepend_axis_num, allow_shape_mismatch);
  t.ValidateMetadataIntegrity();
  return t;
}

ShardedTensor ShardedTensor::FromRankOffsetsMeta(std::string key, DType dtype, Shape local_shape,
                                                 const std::vector<RankOffset>& rank_offsets,
                                                 ReplicaId replica_id, int prepend_axis_num,
                                                 bool allow_shape_mismatch) {
  ShardedTensor t =
      BuildFromRankOffsets(std::move(key), Tensor(), dtype, std::move(local_shape), rank_offsets,
                           std::move(replica_id), prepend_axis_num, allow_shape_mismatch);
  t.ValidateMetadataIntegrity();
  return t;
}

ShardedTensor ShardedTensor::FromRankOffsetsFlat(std::string key, Tensor data_1d,
                                                 Shape non_flat_local_shape,
                                                 const std::vector<RankOffset>& rank_offsets,
                                                 FlatRange flattened_range, ReplicaId replica_id,
                                                 int prepend_axis_num, bool allow_shape_mismatch) {
  if (data_1d.ndim() != 1) {
    Fail(ErrorKind::kInvalidSharding, "Flattened ShardedTensor requires 1D data, got shape: {}",
         ShapeToString(data_1d.shape()));
  }
  if (flattened_range.size() != data_1d.numel()) {
    Fail(ErrorKind::kInvalidSharding,
         "Flattened ShardedTensor data length ({}) must meet the slice length: {}", data_1d.numel(),
         flattened_range.size());
  }
  const DType dtype = data_1d.dtype();
  ShardedTensor t = BuildFromRankOffsets(
      std::move(key), std::move(data_1d), dtype, std::move(non_flat_local_shape), rank_offsets,
      std::move(replica_id), prepend_axis_num, allow_shape_mismatch);
  t.flattened_range = flattened_range;
  t.ValidateMetadataIntegrity();
  return t;
}

std::vector<ShardedTensor> ShardedTensor::Narrow(int64_t dim, int64_t start, int64_t length) const {
  if (dim < 0 || dim >= static_cast<int64_t>(local_shape.size()) || start < 0 || length < 0 ||
      start + length > local_shape[dim]) {
    Fail(ErrorKind::kInvalidArgument, "Cannot narrow dim {} to [{}, {}) for {}", dim, start,
         start + length, ToString());
  }
  const size_t prepended_dim = dim + prepend_axis_num;
  const int64_t local_len = local_shape[dim];
  if (local_len == 0 || global_shape[prepended_dim] % local_len != 0 ||
      global_offset[prepended_dim] % local_len != 0) {
    Fail(ErrorKind::kInvalidSharding,
         "Only regular grid of local tensors is supported for narrowing, got: {}", ToString());
  }
  ShardedTensor out = *this;
  out.global_shape[prepended_dim] = global_shape[prepended_dim] / local_len * length;
  out.global_offset[prepended_dim] = global_offset[prepended_dim] / local_len * length;
  out.local_shape[dim] = length;

  if (!flattened_range) {
    // Megatron returns a view (data.narrow); our Tensor has no views, so the
    // narrowed data is a copy.
    if (data.defined()) {
      Box box{Shape(local_shape.size(), 0), local_shape};
      box.offset[dim] = start;
      box.shape[dim] = length;
      out.data = data.Slice(box);
    }
    return {out};
  }
  if (dim != 0) {
    Fail(ErrorKind::kUnsupported,
         "Narrowing along the first axis is supported for now only, got dim={}", dim);
  }
  // Rows [start, start + length) of the local chunk, intersected with the
  // flat slice, re-expressed relative to the narrowed chunk.
  const int64_t row_volume = Volume(local_shape) / local_len;
  const int64_t before = row_volume * start;
  const int64_t split = row_volume * length;
  const int64_t shifted_start = flattened_range->start - before;
  const int64_t shifted_stop = flattened_range->stop - before;
  if (shifted_stop <= 0 || shifted_start >= split) return {};
  const FlatRange new_range{std::max<int64_t>(shifted_start, 0),
                            std::min<int64_t>(shifted_stop, split)};
  out.flattened_range = new_range;
  if (data.defined()) {
    const int64_t offset = new_range.start - shifted_start;
    out.data = data.FlatSlice({offset, offset + new_range.size()});
  }
  return {out};
}

}  // namespace distckpt
