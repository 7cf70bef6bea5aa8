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
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_GPT_MODEL_H_
#define DISTCKPT_SCENARIO_GPT_MODEL_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/param.h"
#include "topology/topology.h"

namespace distckpt {

struct GptConfig {
  std::string prefix;  // prepended to every key and path ("" or e.g. "teacher.")
  int64_t layers = 2, hidden = 8, ffn = 16, heads = 2, vocab = 64;
  int64_t query_groups = 0;      // grouped-query attention; 0 = heads (linear_qkv 3*hidden rows)
  int64_t vocab_multiple = 128;  // Megatron's make_vocab_size_divisible_by
  int64_t experts = 0;           // 0 = dense
  nlohmann::json moe_layer_freq = 1;  // every k-th layer is MoE, or a 0/1 list per layer
  std::vector<bool> moe_layers;       // per global layer, derived from moe_layer_freq
  bool glu = false;
  bool tied = false;  // share_embeddings_and_output_weights
  DType dtype = DType::kBF16;
  // pipeline_layout by number of virtual stages (pp*vpp): stage lists of
  // "embedding" | "decoder" | "loss", stage index = vpp_stage*pp + pp_rank.
  std::map<int, std::vector<std::vector<std::string>>> layouts;
  std::map<std::string, std::string> rename;  // key -> key (to test key changes)
  // What Megatron's own GPT configurations store beyond the defaults above
  // (megatron-semantics §5.2; pretrain_gpt.py's arguments in parentheses):
  bool fused_norms = false;  // layer norms under the linears' names (Megatron-Core's
                             // `self_attention.linear_qkv.layer_norm_weight`,
                             // `mlp.linear_fc1.layer_norm_weight`; TE and local specs)
  bool norm_bias = false;    // LayerNorm: every norm has a bias (--normalization LayerNorm)
  // Linear biases: -1 the generator's default (linear_qkv, linear_proj and
  // linear_fc2); 0 none (--disable-bias-linear); 1 every linear, linear_fc1
  // included (--add-bias-linear, Megatron's default).
  int linear_bias = -1;
  bool qkv_bias = false;            // --add-qkv-bias (with linear_bias 0)
  int64_t position_embeddings = 0;  // learned absolute positions: rows (max_position_embeddings)
  std::vector<std::string> extra_state = {"self_attention.linear_qkv"};  // per-layer modules
  bool output_extra_state = false;  // output_layer._extra_state
  // Megatron's rerun state machine: `rerun_state_machine_state`, one object
  // per rank on a (world,) grid (core/rerun_state_machine.py).
  bool rerun_state = false;
  bool router_bias = false;  // mlp.router.bias (Megatron 0.20 with linear biases)
  std::string expert_prefix =
      "mlp.experts.";  // Megatron 0.20's local SequentialMLP: "mlp.experts.experts."

  bool homogeneous() const;
};

// Parses a model section (and `overrides` applied on top, e.g. a pair's
// load_model); errors name the JSON path.
GptConfig ParseGptConfig(const nlohmann::json& json, const std::string& path);
GptConfig ApplyGptOverrides(const GptConfig& base, const nlohmann::json& overrides,
                            const std::string& path);

// Throws CheckpointError(kInvalidArgument) naming the dimension when the
// topology cannot shard this model ("gpt hidden=64 is not divisible by tp=6").
void CheckGptTopology(const GptConfig& config, const Topology& topology);

// Rank `rank`'s parameters and objects (metadata only; the caller fills data).
std::vector<Param> ExpandGptParams(const GptConfig& config, const Topology& topology, int rank);
std::vector<ObjectParam> ExpandGptObjects(const GptConfig& config, uint64_t seed,
                                          const Topology& topology, int rank);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_GPT_MODEL_H_
