// The options of a scenario's GPT model generator (`"model": {"kind": "gpt",
// ...}`, scenarios/README.md), parsed with errors naming the JSON path; the
// generator itself is harness/expand/gpt_model.h.
//
// Thread-safety: value types and pure functions.
#ifndef DISTCKPT_SCENARIO_GPT_CONFIG_H_
#define DISTCKPT_SCENARIO_GPT_CONFIG_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"

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

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_GPT_CONFIG_H_
