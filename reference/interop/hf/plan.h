// The model of a Megatron GPT checkpoint for export (GptExportSpec) and the
// plans that name its tensors: Hugging Face names (PlanHfExport) and
// Megatron's own names one tensor per layer (PlanMegatronPerLayer).
//
// The model's fields come from one function, GptExportSpecFromFile: a JSON
// file holding {"layers", "hidden", "heads", "ffn", "vocab", "glu", "tied",
// "prefix", "query_groups"} or a scenario file whose "model" section holds
// them (the first GPT model). `--spec gpt` inference from the checkpoint's
// metadata plugs in here (GptExportSpecFromJson of the inferred model section).
//
// Names (Llama; architecture.cc for GPT-2, Qwen2, Mixtral, Qwen2-MoE):
// embedding.word_embeddings.weight -> model.embed_tokens.weight (vocab padding dropped);
// decoder.layers.* (stacked on a layer axis or one key per layer) -> model.layers.{i}.*: linear_qkv
// split per query group in Megatron's interleaved order [q of the group's heads, k, v] into
// self_attn.q_proj / k_proj / v_proj; linear_proj -> self_attn.o_proj;
// input_layernorm, pre_mlp_layernorm (or TransformerEngine's fused
// linear_qkv.layer_norm_weight, linear_fc1.layer_norm_weight) -> input_layernorm,
// post_attention_layernorm; SwiGLU linear_fc1 [gate; up] -> mlp.gate_proj,
// mlp.up_proj (without GLU: mlp.up_proj); linear_fc2 -> mlp.down_proj;
// decoder.final_layernorm -> model.norm; output_layer -> lm_head (absent
// when tied: config.json says tie_word_embeddings). Biases map alike.
//
// Errors: CheckpointError(kShapeMismatch / kKeyMismatch / kUnsupported /
// kInvalidArgument) naming the key or spec field.
// Thread-safety: pure functions.
#ifndef DISTCKPT_INTEROP_HF_PLAN_H_
#define DISTCKPT_INTEROP_HF_PLAN_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/box.h"
#include "interop/export_source.h"

namespace distckpt {

struct GptExportSpec {
  std::string prefix;
  int64_t layers = 0, hidden = 0, heads = 0, query_groups = 0, ffn = 0, vocab = 0;
  bool glu = false, tied = false;
  int64_t kv_channels = 0;        // the head dim (0: hidden / heads)
  int64_t experts = 0, topk = 0;  // MoE: ffn is the experts' (moe_ffn_hidden_size)
  // "LayerNorm" / "RMSNorm" and "learned_absolute" / "rope": the spec's, else
  // Megatron's args, else decided by the keys (norm biases, position table).
  std::string normalization, position;
  std::string dtype;    // the model's, for config.json's torch_dtype
  nlohmann::json args;  // Megatron's args from the checkpoint's common state (or null)
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
};

GptExportSpec GptExportSpecFromFile(const std::string& path);
// The same from JSON (a model section, or an object holding "model");
// errors name `source`.
GptExportSpec GptExportSpecFromJson(nlohmann::json json, const std::string& source);

// The Hugging Face architecture that computes the same function as the
// checkpoint's model, chosen from its features (spec, Megatron's args, the
// stored keys): "gpt2" (LayerNorm with biases, learned positions, GELU,
// every linear biased, MHA; Conv1D weights transposed, c_attn = [q|k|v]),
// "llama" (RMSNorm, RoPE, SwiGLU; attention_bias / mlp_bias when all of
// q/k/v/o resp. fc1/fc2 are biased), "qwen2" (q/k/v biases only),
// "mixtral" (MoE, softmax top-k renormalised, no biases) and "qwen2_moe"
// (MoE with q/k/v biases, pre-softmax routing or gated shared experts).
// Anything else is refused (kUnsupported) naming every feature in the way.
// `config` is config.json (every field the architecture reads).
struct HfArchitecture {
  std::string model_type, class_name;
  nlohmann::ordered_json config;
};
HfArchitecture ChooseHfArchitecture(const GptExportSpec& spec,
                                    const std::vector<std::pair<std::string, Shape>>& stored);

// The HF tensors of a checkpoint whose tensors are `stored` (global shapes,
// prepended axes included), in the architecture's order; MoE experts one HF
// tensor per expert. Throws naming the key when a tensor the architecture
// needs is missing or has another shape.
struct HfExportPlan {
  HfArchitecture architecture;
  std::vector<HfTensor> tensors;
};
HfExportPlan PlanHfExport(const GptExportSpec& spec,
                          const std::vector<std::pair<std::string, Shape>>& stored);

// Megatron's own names, one tensor per layer, for export --to fsdp-dtensor:
// every model tensor of the checkpoint (not "optimizer.*") under its name
// without the spec's prefix; stacked layers unstacked into
// "decoder.layers.<i>.<name>"; with GLU, linear_fc1.weight (and .bias) split
// into "..._w" (rows [0, ffn): W of every TP rank) and "..._v" (V), as
// Megatron's handle_swiglu_in_state_dict names them.
std::vector<HfTensor> PlanMegatronPerLayer(
    const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_HF_PLAN_H_
