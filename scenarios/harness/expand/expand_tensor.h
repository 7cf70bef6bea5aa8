// Expands one tensor spec or object spec of a scenario into the shard a
// rank holds under a topology (metadata only, no data).
//
// Replica ids follow Megatron's (PP, TP, DP) convention: each component is
// the rank's coordinate along mesh dims that do not split the tensor (the DP
// component covers cp and dp, or ep and edp for expert-sharded tensors).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_EXPAND_TENSOR_H_
#define DISTCKPT_SCENARIO_EXPAND_TENSOR_H_

#include <string>
#include <vector>

#include "harness/expand/param.h"
#include "harness/expand/values.h"
#include "harness/spec/spec.h"
#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"
#include "topology/topology.h"

namespace distckpt {

// The shards of `spec` that `rank` holds (metadata only, no data): one, or
// with a `stack`, one per stack index the rank holds (possibly none). Throws
// CheckpointError(kInvalidArgument) when the topology cannot split the
// tensor ("tensor 'w' axis 0 of size 10 cannot be split evenly into
// tp*dp=4 parts"), before anything is written.
// With `glu`, each shard is two: W then V (see TensorSpec::glu).
std::vector<ShardedTensor> ExpandTensor(const TensorSpec& spec, const Topology& topology, int rank);
// ExpandTensor's shards as the rank's parameters: one per shard, or per
// [W, V] pair of a GLU tensor (a factory of two pieces).
std::vector<Param> ExpandTensorParams(const TensorSpec& spec, const Topology& topology, int rank);
ShardedObject ExpandObject(const ObjectSpec& spec, uint64_t seed, const Topology& topology,
                           int rank);
// `t` (no prepended axes yet) behind prepended axes of `sizes` at `index`
// (Megatron's prepend_axis_num): global shape and offset gain them in front,
// the local shape does not, each index is its own fragment.
ShardedTensor WithPrependedAxes(ShardedTensor t, const Shape& sizes, const Shape& index);
// The dict path of `spec`'s shard `shard`: the key, then ".<i>" per stack
// index ("w.3"); and the logical (unpadded) global shape, stack included.
std::string ParamPath(const TensorSpec& spec, const ShardedTensor& shard);
Shape LogicalShape(const TensorSpec& spec);
// Where a shard's elements are in a logical tensor.
ShardLocation LocationOf(const Shape& logical_shape, const ShardedTensor& shard);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_EXPAND_TENSOR_H_
