// The GPT model generator: expands `"model": {"kind": "gpt", ...}` into the
// sharded state dict Megatron-Core's GPTModel would produce on each rank
// (docs/megatron-semantics.md §5.2), so topology changes exercise the same keys,
// offsets, replica ids and factories as real Megatron checkpoints.
//
// Per rank: vocab-parallel `embedding.word_embeddings.weight` (vocab padded
// to a multiple of vocab_multiple*tp, allow_shape_mismatch) on the stage
// holding "embedding"; `decoder.layers.*` parameters stacked on a prepended
// layer axis indexed by the GLOBAL layer number (from PP rank, VPP stage and
// the pipeline layout); column-parallel linear_qkv / linear_fc1, row-parallel
// linear_proj / linear_fc2; GLU fc1 as a ShardedTensorFactory of W and V
// halves; layer norms and row-parallel biases replicated over TP; MoE layers
// with experts split over EP by global expert index (keys per global layer
// when layers are not homogeneous, as Megatron does); `decoder.final_layernorm`
// and `output_layer.weight` (or, tied, a non-main replica of the embedding)
// on the stage holding "loss"; per-layer `_extra_state` ShardedObjects and a
// per-(PP, TP) `rng_state` object. Context parallel is an extra replica
// dimension (folded with DP, as Megatron's DP x CP group).
//
// The model section itself is parsed by harness/spec/gpt_config.h.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_GPT_MODEL_H_
#define DISTCKPT_SCENARIO_GPT_MODEL_H_

#include <cstdint>
#include <vector>

#include "harness/expand/param.h"
#include "harness/spec/gpt_config.h"
#include "topology/topology.h"

namespace distckpt {

// Throws CheckpointError(kInvalidArgument) naming the dimension when the
// topology cannot shard this model ("gpt hidden=64 is not divisible by tp=6").
void CheckGptTopology(const GptConfig& config, const Topology& topology);

// Rank `rank`'s parameters and objects (metadata only; the caller fills data).
std::vector<Param> ExpandGptParams(const GptConfig& config, const Topology& topology, int rank);
std::vector<ObjectParam> ExpandGptObjects(const GptConfig& config, uint64_t seed,
                                          const Topology& topology, int rank);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_GPT_MODEL_H_
