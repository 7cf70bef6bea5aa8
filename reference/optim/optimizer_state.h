// Adam optimizer state mapped onto the model's sharding (docs/megatron-semantics.md
// §7): `optimizer.state.{exp_avg,exp_avg_sq,<main param>}.<model key>`, one
// common step, param groups in common state with their `params` lists as
// LocalNonpersistentObjects, and the distributed-optimizer formats:
//
// - kPlain: Float16/FP32 optimizer: model-space copies of every parameter
//   (fp32 main params `fp32_param` only for non-f32 parameters).
// - kFullyShardedModelSpace (v0.15.3): per parameter the rank's DP slice of
//   the gradient buffer as a flattened range of the model shard, replica id
//   (PP, TP, 0): TP, PP and DP may all change.
// - kDpReshardable: bucket space, keys
//   `optimizer.distributed.dp_group_idx_{g}.gbuf_idx_0.dtype_{dt}.bucket_idx_{b}.{state}`
//   of global shape (numel_unpadded,), one uneven 1-D shard per parameter
//   piece and padding gap inside the rank's DP slice; per_bucket_numel_unpadded
//   as a ShardedObject. DP may change; other (TP, PP) is refused by
//   CheckOptimizerResumable before anything is read.
// - kFullyReshardable: model-space tensors with the model's sharding and
//   replica ids (main params as `param`): any change.
//
// The optimizer covers the parameters it is given, each ShardedTensor piece
// (GLU factories give two) as its own parameter. Distributed formats shard
// over the DP x CP group of each (TP, PP) coordinate. With ep > 1 the expert
// parameters have their own distributed optimizer, as Megatron's
// ChainedOptimizer of a dense and an expert DistributedOptimizer: its buffers
// split over the expert DP group (dp*cp/ep ranks), its dp_group_idx is the
// rank in the expert model-parallel group (tp-ep-pp), and dp_reshardable keys
// get `chained_{0,1}.` prefixes (model-space formats keep their keys, as with
// Megatron's chained_optim_avoid_prefix). A dp_reshardable checkpoint of a
// model with experts records its EP and refuses another.
//
// Thread-safety: pure functions and value types.
#ifndef DISTCKPT_OPTIM_OPTIMIZER_STATE_H_
#define DISTCKPT_OPTIM_OPTIMIZER_STATE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"
#include "mapping/state_dict.h"
#include "topology/topology.h"

namespace distckpt {

enum class OptimFormat { kPlain, kFullyShardedModelSpace, kDpReshardable, kFullyReshardable };

// "plain" | "fully_sharded_model_space" | "dp_reshardable" | "fully_reshardable";
// throws CheckpointError(kInvalidArgument) listing the valid names.
OptimFormat ParseOptimFormat(std::string_view name);
std::string_view OptimFormatName(OptimFormat format);

struct OptimizerConfig {
  OptimFormat format = OptimFormat::kPlain;
  int64_t step = 1;
  bool uneven_step = false;   // the last parameter's step differs (Megatron refuses to save)
  int64_t pad_divisor = 128;  // bucket end padding: lcm(dp, pad_divisor)
  int64_t bucket_numel = 0;   // close a bucket at this many elements (0 = one bucket)
};

struct OptimTensor {
  std::string path;      // dict path of the leaf
  ShardedTensor tensor;  // metadata only
  int source = -1;  // output: index of the model parameter it is the state of (-1: bucket space)
  bool expert = false;  // input: an expert-parallel parameter (Megatron's allreduce=False)
};
struct OptimObject {
  std::string path;
  ShardedObject object;  // with data
};

struct OptimizerState {
  std::vector<OptimTensor> tensors;  // f32, keys as above
  std::vector<OptimObject> objects;
  // {"param_groups": [{lr, betas, eps, weight_decay, params: nonpersistent ids}, {...}],
  //  "state": {"common_step": n}, "param_state_sharding_type": name, "tp": T, "pp": P}
  Node common;
};

// `model` are rank `rank`'s parameter pieces (metadata only) in order.
// Throws CheckpointError(kInvalidArgument) for flattened model pieces or an
// uneven step ("The optimizer step differs per parameter...").
OptimizerState ExpandOptimizer(const OptimizerConfig& config, const std::vector<OptimTensor>& model,
                               const Topology& topology, int rank);

// Megatron's common step: every parameter's step must be equal.
int64_t CommonStep(const std::vector<int64_t>& steps);

// "optimizer.state.<state>.<model key>".
std::string OptimStateKey(std::string_view state, std::string_view model_key);

// Refuses a dp_reshardable checkpoint (its common "optimizer" section) under
// another TP or PP: CheckpointError(kUnsupported) "(TP, PP) mismatch after
// resume ((2, 2) vs (2, 4)): not supported for DistributedOptimizer with
// sharding type dp_reshardable"; likewise "EP mismatch after resume" when it
// recorded another EP (models with experts). Other formats and sections pass.
void CheckOptimizerResumable(const nlohmann::json& saved_optimizer, const Topology& topology);

// Megatron gives expert parameters their own optimizer (a ChainedOptimizer
// member whose param groups say is_expert_parallel) exactly when they use the
// expert process groups: EP > 1 (tensor_parallel/layers.py `use_expert_pgs`).
// A checkpoint saved with such groups does not load where none are built, nor
// the reverse: Megatron fails in _filter_and_reorder_param_groups ("Could not
// find parameter group with key ... in loaded checkpoint"). Refuses that
// (CheckpointError(kUnsupported)) given the common "optimizer" section (one
// optimizer's state or a chain {"0": ..., "1": ...}) and whether the model
// has experts (`num_experts` > 0 in its args); param groups that do not say
// is_expert_parallel (other writers, older Megatron) pass.
void CheckExpertParamGroupsResumable(const nlohmann::json& saved_optimizer, bool model_has_experts,
                                     const Topology& topology);

}  // namespace distckpt

#endif  // DISTCKPT_OPTIM_OPTIMIZER_STATE_H_
