// The HF architecture of a Megatron GPT checkpoint and its export plan
// (interop/hf/plan.h: ChooseHfArchitecture, PlanHfExport).
//
// The HF modeling files these names and layouts follow (huggingface/
// transformers, src/transformers/models/): llama/modeling_llama.py,
// qwen2/modeling_qwen2.py, gpt2/modeling_gpt2.py (Conv1D: y = x @ W + b,
// W stored [in, out]; c_attn's output is [q | k | v], each head-major),
// mixtral/modeling_mixtral.py (block_sparse_moe.gate, experts.{e}.w1/w2/w3),
// qwen2_moe/modeling_qwen2_moe.py (mlp.gate, mlp.experts.{e}.*_proj,
// mlp.shared_expert.*, mlp.shared_expert_gate).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "interop/hf/plan.h"

namespace distckpt {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // (first row, rows)

// Megatron's args (common state "args", possibly {"state": {...}}).
const json* ArgsOf(const json& args) {
  if (!args.is_object()) return nullptr;
  if (args.contains("state") && args["state"].is_object()) return &args["state"];
  return &args;
}

class ArchPlanner {
 public:
  ArchPlanner(const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored)
      : s_(spec) {
    for (const auto& [k, shape] : stored) stored_[k] = shape;
    args_ = ArgsOf(spec.args);
  }

  HfArchitecture Choose() {
    Features();
    HfArchitecture a;
    std::vector<std::string> why;  // features no supported architecture computes
    auto need = [&](bool ok, const std::string& feature) {
      if (!ok) why.push_back(feature);
    };
    // Refused whatever the architecture: they change the function computed.
    need(!ArgBool("apply_residual_connection_post_layernorm"),
         "apply_residual_connection_post_layernorm");
    need(!ArgBool("layernorm_zero_centered_gamma"), "layernorm_zero_centered_gamma");
    need(!ArgBool("multi_latent_attention"), "multi_latent_attention");
    need(!ArgBool("squared_relu"), "squared_relu activation");
    need(!ArgBool("use_rope_scaling"), "use_rope_scaling (Llama 3 RoPE scaling)");
    need(!ArgBool("rotary_interleaved"), "rotary_interleaved");
    need(ArgNum("rotary_percent", 1.0) == 1.0, "rotary_percent != 1");
    need(!ArgBool("qk_layernorm") && !f_.qk_norm, "qk_layernorm (Qwen3) is not exported yet");
    need(ArgStr("softmax_type", "vanilla") == "vanilla",
         "softmax_type " + ArgStr("softmax_type", ""));
    need(ArgJson("window_size").is_null(), "window_size (sliding-window attention)");
    const bool rms = f_.normalization == "RMSNorm";
    const bool layernorm = f_.normalization == "LayerNorm";
    const bool rope = f_.position == "rope";
    const bool learned = f_.position == "learned_absolute";
    const bool any_linear_bias = f_.qkv_bias || f_.proj_bias || f_.fc1_bias || f_.fc2_bias;
    if (s_.experts > 0) {
      need(rms, "MoE with " + f_.normalization + " (Mixtral / Qwen2-MoE use RMSNorm)");
      need(rope, "MoE with " + f_.position + " positions (Mixtral / Qwen2-MoE use RoPE)");
      need(s_.glu, "MoE experts without SwiGLU (Mixtral / Qwen2-MoE experts are SwiGLU)");
      need(!f_.proj_bias && !f_.fc1_bias && !f_.fc2_bias && !f_.expert_bias,
           "MoE with linear biases (add_bias_linear)");
      need(!f_.router_bias, "MoE router bias");
      need(!f_.norm_bias, "LayerNorm biases");
      need(ArgStr("moe_router_score_function", "softmax") == "softmax",
           "moe_router_score_function " + ArgStr("moe_router_score_function", ""));
      need(ArgJson("moe_router_topk_scaling_factor").is_null() ||
               ArgNum("moe_router_topk_scaling_factor", 1.0) == 1.0,
           "moe_router_topk_scaling_factor");
      need(ArgJson("moe_expert_capacity_factor").is_null(),
           "moe_expert_capacity_factor (token dropping)");
      need(ArgJson("moe_router_num_groups").is_null(),
           "moe_router_num_groups (group-limited routing)");
      need(!ArgBool("moe_router_enable_expert_bias"), "moe_router_enable_expert_bias");
      need(!f_.mixed_layers, "dense and MoE layers mixed (moe_layer_freq)");
      need(s_.topk > 0, "moe_router_topk unknown (pass --set topk=K)");
      const bool pre_softmax = ArgBool("moe_router_pre_softmax");
      if (f_.shared_experts || f_.qkv_bias || pre_softmax) {
        // Qwen2-MoE: q/k/v biases always, an optional sigmoid-gated shared expert,
        // norm_topk_prob = !pre_softmax.
        need(f_.qkv_bias,
             "MoE without q/k/v biases but with shared experts or pre-softmax "
             "routing (Qwen2-MoE has q/k/v biases)");
        need(!f_.shared_experts || f_.shared_gate,
             "shared experts without moe_shared_expert_gate (Qwen2-MoE gates them)");
        a.model_type = "qwen2_moe";
        a.class_name = "Qwen2MoeForCausalLM";
      } else {
        a.model_type = "mixtral";
        a.class_name = "MixtralForCausalLM";
      }
    } else if (layernorm && learned && !s_.glu) {
      // GPT-2: LayerNorm with biases, learned positions, GELU, every linear biased, MHA.
      need(f_.norm_bias, "LayerNorm without biases (GPT-2's have them)");
      need(f_.qkv_bias && f_.proj_bias && f_.fc1_bias && f_.fc2_bias,
           "GPT-2-style model without every linear bias (add_bias_linear)");
      need(s_.query_groups == s_.heads, "grouped-query attention with learned positions");
      need(s_.head_dim() * s_.heads == s_.hidden, "kv_channels * heads != hidden (GPT-2)");
      a.model_type = "gpt2";
      a.class_name = "GPT2LMHeadModel";
    } else if (rms && rope && s_.glu) {
      need(!f_.norm_bias, "RMSNorm with biases");
      if (f_.qkv_bias && !f_.proj_bias && !f_.fc1_bias && !f_.fc2_bias) {
        a.model_type = "qwen2";
        a.class_name = "Qwen2ForCausalLM";
      } else {
        // Llama: attention_bias covers q, k, v and o; mlp_bias gate, up and down.
        need(f_.qkv_bias == f_.proj_bias,
             "q/k/v biases and output-projection bias differ (Llama's attention_bias covers "
             "both, Qwen2 has q/k/v only)");
        need(f_.fc1_bias == f_.fc2_bias,
             "fc1 and fc2 biases differ (Llama's mlp_bias covers both)");
        a.model_type = "llama";
        a.class_name = "LlamaForCausalLM";
      }
    } else {
      why.push_back(
          fmt::format("{} + {} positions + {}: no supported architecture (GPT-2: "
                      "LayerNorm, learned, GELU; Llama/Qwen2: RMSNorm, RoPE, SwiGLU)",
                      f_.normalization, f_.position, s_.glu ? "SwiGLU" : "GELU"));
      (void)any_linear_bias;
    }
    if (!why.empty()) {
      Fail(ErrorKind::kUnsupported,
           "export --to hf: no Hugging Face architecture computes this model: {}",
           fmt::join(why, "; "));
    }
    a.config = Config(a);
    return a;
  }

  std::vector<HfTensor> Plan(const HfArchitecture& a) {
    if (a.model_type == "gpt2") {
      Gpt2();
    } else {
      LlamaLike(a.model_type);
    }
    return std::move(out_);
  }

 private:
  struct Found {
    std::string key;
    Shape shape;
    size_t lead = 0;       // leading axes fixed by layer (and expert) index
    bool stacked = false;  // a layer axis first
  };

  // --- features -------------------------------------------------------------
  struct F {
    std::string normalization, position;
    bool norm_bias = false, qkv_bias = false, proj_bias = false, fc1_bias = false, fc2_bias = false,
         qk_norm = false, router_bias = false, expert_bias = false, shared_experts = false,
         shared_gate = false, mixed_layers = false;
  } f_;

  void Features() {
    f_.norm_bias = Has(0, InputNorm(0, "bias")) || Find("decoder.final_layernorm.bias");
    f_.qkv_bias = Has(0, "self_attention.linear_qkv.bias");
    f_.proj_bias = Has(0, "self_attention.linear_proj.bias");
    f_.qk_norm = Has(0, "self_attention.q_layernorm.weight");
    if (s_.experts > 0) {
      f_.router_bias = Has(0, "mlp.router.bias");
      f_.expert_bias = ExpertKey(0, "linear_fc1.bias").has_value() ||
                       ExpertKey(0, "linear_fc2.bias").has_value();
      f_.shared_experts = Has(0, "mlp.shared_experts.linear_fc1.weight");
      f_.shared_gate = Has(0, "mlp.shared_experts.gate_weight");
      for (int64_t i = 0; i < s_.layers; ++i) f_.mixed_layers |= !Has(i, "mlp.router.weight");
    } else {
      f_.fc1_bias = Has(0, "mlp.linear_fc1.bias");
      f_.fc2_bias = Has(0, "mlp.linear_fc2.bias");
    }
    // Normalization and positions: the spec, else Megatron's args, else the keys.
    f_.normalization = s_.normalization;
    if (f_.normalization.empty()) f_.normalization = ArgStr("normalization", "");
    if (f_.normalization.empty()) f_.normalization = f_.norm_bias ? "LayerNorm" : "RMSNorm";
    f_.position = s_.position;
    if (f_.position.empty()) f_.position = ArgStr("position_embedding_type", "");
    const bool learned_key = Find("embedding.position_embeddings.weight") != nullptr;
    if (f_.position.empty()) f_.position = learned_key ? "learned_absolute" : "rope";
    if (f_.position == "learned_absolute" && !learned_key) {
      Fail(ErrorKind::kKeyMismatch,
           "export --to hf: the model has learned absolute positions but the checkpoint has no "
           "'{}embedding.position_embeddings.weight'",
           s_.prefix);
    }
  }

  // --- Megatron args ----------------------------------------------------------
  json ArgJson(const char* name) const {
    if (!args_ || !args_->contains(name)) return nullptr;
    return (*args_)[name];
  }
  bool ArgBool(const char* name) const {
    json v = ArgJson(name);
    return v.is_boolean() && v.get<bool>();
  }
  double ArgNum(const char* name, double fallback) const {
    json v = ArgJson(name);
    return v.is_number() ? v.get<double>() : fallback;
  }
  std::string ArgStr(const char* name, const std::string& fallback) const {
    json v = ArgJson(name);
    return v.is_string() ? v.get<std::string>() : fallback;
  }

  ordered_json Config(const HfArchitecture& a) const {
    const std::string dtype = s_.dtype.empty() ? "float32" : s_.dtype;
    const double eps = ArgNum("norm_epsilon", ArgNum("layernorm_epsilon", 1e-5));
    int64_t positions = static_cast<int64_t>(ArgNum("max_position_embeddings", 0));
    if (const Shape* pos = Find("embedding.position_embeddings.weight"); pos && pos->size() == 2)
      positions = (*pos)[0];
    if (positions <= 0) positions = 4096;
    ordered_json c = {{"architectures", {a.class_name}}, {"model_type", a.model_type}};
    if (a.model_type == "gpt2") {
      // Megatron's GELU: with bias_gelu_fusion (the default) its bias_gelu kernel, the tanh
      // approximation (HF "gelu_new"); otherwise torch's erf GELU ("gelu"); openai_gelu: tanh.
      const bool tanh_gelu = ArgBool("bias_gelu_fusion") || ArgBool("openai_gelu");
      c.update(ordered_json{{"vocab_size", s_.vocab},
                            {"n_positions", positions},
                            {"n_embd", s_.hidden},
                            {"n_layer", s_.layers},
                            {"n_head", s_.heads},
                            {"n_inner", s_.ffn},
                            {"activation_function", tanh_gelu ? "gelu_new" : "gelu"},
                            {"layer_norm_epsilon", eps},
                            {"resid_pdrop", 0.0},
                            {"embd_pdrop", 0.0},
                            {"attn_pdrop", 0.0},
                            {"scale_attn_weights", true},
                            {"scale_attn_by_inverse_layer_idx", false},
                            {"reorder_and_upcast_attn", false},
                            {"tie_word_embeddings", s_.tied},
                            {"torch_dtype", dtype}});
      return c;
    }
    c.update(ordered_json{{"vocab_size", s_.vocab},
                          {"hidden_size", s_.hidden},
                          {"intermediate_size", s_.ffn},
                          {"num_hidden_layers", s_.layers},
                          {"num_attention_heads", s_.heads},
                          {"num_key_value_heads", s_.query_groups},
                          {"head_dim", s_.head_dim()},
                          {"hidden_act", "silu"},
                          {"max_position_embeddings", positions},
                          {"rms_norm_eps", eps},
                          {"rope_theta", ArgNum("rotary_base", 10000)},
                          {"attention_dropout", 0.0},
                          {"tie_word_embeddings", s_.tied},
                          {"torch_dtype", dtype}});
    if (a.model_type == "llama") {
      c["attention_bias"] = f_.qkv_bias;
      c["mlp_bias"] = f_.fc1_bias;
    }
    if (a.model_type == "qwen2" || a.model_type == "qwen2_moe") {
      c["use_sliding_window"] = false;
      c["max_window_layers"] = s_.layers;
    }
    if (a.model_type == "mixtral") {
      c["num_local_experts"] = s_.experts;
      c["num_experts_per_tok"] = s_.topk;
      c["router_aux_loss_coef"] = ArgNum("moe_aux_loss_coeff", 0.0);
      c["intermediate_size"] = s_.ffn;  // the experts' (moe_ffn_hidden_size)
      c["sliding_window"] = nullptr;
    }
    if (a.model_type == "qwen2_moe") {
      c["num_experts"] = s_.experts;
      c["num_experts_per_tok"] = s_.topk;
      c["moe_intermediate_size"] = s_.ffn;
      c["shared_expert_intermediate_size"] = f_.shared_experts ? SharedFfn() : 0;
      c["norm_topk_prob"] = !ArgBool("moe_router_pre_softmax");
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = json::array();
      c["qkv_bias"] = true;
    }
    return c;
  }

  int64_t SharedFfn() const {
    auto k = LayerKey(0, "mlp.shared_experts.linear_fc2.weight");
    return k ? k->shape.back() : 0;
  }

  // --- stored keys ------------------------------------------------------------
  const Shape* Find(const std::string& key) const {
    auto it = stored_.find(s_.prefix + key);
    return it == stored_.end() ? nullptr : &it->second;
  }
  // Layer i's `name`: stacked ("decoder.layers.<name>", layer axis first) or
  // one key per layer ("decoder.layers.<i>.<name>").
  std::optional<Found> LayerKey(int64_t i, const std::string& name) const {
    const std::string stacked = "decoder.layers." + name;
    if (const Shape* shape = Find(stacked)) {
      if (shape->empty() || (*shape)[0] != s_.layers) {
        Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has shape {}, not {} stacked layers",
             s_.prefix + stacked, ShapeToString(*shape), s_.layers);
      }
      return Found{stacked, *shape, 1, true};
    }
    const std::string single = fmt::format("decoder.layers.{}.{}", i, name);
    if (const Shape* shape = Find(single)) return Found{single, *shape, 0, false};
    return std::nullopt;
  }
  bool Has(int64_t i, const std::string& name) const { return LayerKey(i, name).has_value(); }
  // An expert tensor of layer i (SequentialMLP "mlp.experts.experts.*" or grouped-GEMM
  // "mlp.experts.*"): the expert axis follows the layer axis.
  std::optional<Found> ExpertKey(int64_t i, const std::string& name) const {
    for (const char* p : {"mlp.experts.experts.", "mlp.experts."}) {
      if (auto k = LayerKey(i, p + name)) {
        if (k->shape.size() <= k->lead || k->shape[k->lead] != s_.experts) {
          Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has shape {}, not {} experts",
               s_.prefix + k->key, ShapeToString(k->shape), s_.experts);
        }
        k->lead += 1;
        return k;
      }
    }
    return std::nullopt;
  }
  // The layer-norm names: Megatron-Core's fused `linear_qkv.layer_norm_*`,
  // `linear_fc1.layer_norm_*` (local and TE specs) or the module names.
  std::string InputNorm(int64_t i, const std::string& what) const {
    const std::string fused = "self_attention.linear_qkv.layer_norm_" + what;
    return Has(i, fused) ? fused : "input_layernorm." + what;
  }
  std::string PreMlpNorm(int64_t i, const std::string& what) const {
    const std::string fused = "mlp.linear_fc1.layer_norm_" + what;
    return Has(i, fused) ? fused : "pre_mlp_layernorm." + what;
  }
  [[noreturn]] void Missing(const std::string& what) const {
    Fail(ErrorKind::kKeyMismatch, "export --to hf: the checkpoint has no tensor '{}{}'", s_.prefix,
         what);
  }

  // --- plan building ------------------------------------------------------------
  // HF tensor `hf` = rows `ranges` of `k` at leading indices `lead` (layer, expert);
  // transposed (2-D) for GPT-2's Conv1D.
  void Take(const std::string& hf, const Found& k, const std::vector<int64_t>& lead,
            const Ranges& ranges, bool transpose = false) {
    HfTensor t;
    t.name = hf;
    t.transpose = transpose;
    Shape rest(k.shape.begin() + static_cast<std::ptrdiff_t>(k.lead), k.shape.end());
    if (rest.empty()) rest = {1};
    int64_t rows = 0;
    for (auto [offset, count] : ranges) {
      HfPiece p;
      p.key = s_.prefix + k.key;
      p.offset = Shape(k.shape.size(), 0);
      p.shape = k.shape;
      for (size_t a = 0; a < k.lead; ++a) {
        p.offset[a] = lead.at(a);
        p.shape[a] = 1;
      }
      if (k.lead < k.shape.size()) {
        if (offset + count > k.shape[k.lead]) {
          Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has {} rows, {} needed", p.key,
               k.shape[k.lead], offset + count);
        }
        p.offset[k.lead] = offset;
        p.shape[k.lead] = count;
      }
      rows += count;
      t.pieces.push_back(std::move(p));
    }
    t.shape = rest;
    t.shape[0] = rows;
    if (transpose) {
      if (t.shape.size() != 2) {
        Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' is not 2-D", t.pieces[0].key);
      }
      std::swap(t.shape[0], t.shape[1]);
    }
    out_.push_back(std::move(t));
  }
  std::vector<int64_t> LeadOf(const Found& k, int64_t i, int64_t e = -1) const {
    std::vector<int64_t> lead;
    if (k.stacked) lead.push_back(i);
    if (e >= 0) lead.push_back(e);
    return lead;
  }
  Found Need(int64_t i, const std::string& name) const {
    auto k = LayerKey(i, name);
    if (!k) Missing(fmt::format("decoder.layers[.{}].{}", i, name));
    return *k;
  }
  int64_t RowsOf(const Found& k) const { return k.shape.size() > k.lead ? k.shape[k.lead] : 1; }
  void ExpectRows(const Found& k, int64_t rows, const std::string& why) const {
    if (RowsOf(k) != rows) {
      Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has {} rows; {} needs {}",
           s_.prefix + k.key, RowsOf(k), why, rows);
    }
  }
  // Layer i's `name` whole (all rows) as `hf`, when stored (or required).
  void LayerWhole(int64_t i, const std::string& name, const std::string& hf, bool required,
                  bool transpose = false) {
    auto k = LayerKey(i, name);
    if (!k) {
      if (required) Missing(fmt::format("decoder.layers[.{}].{}", i, name));
      return;
    }
    Take(hf, *k, LeadOf(*k, i), {{0, RowsOf(*k)}}, transpose);
  }
  void Vocab(const std::string& key, const std::string& hf) {
    const Shape* shape = Find(key);
    if (!shape) Missing(key);
    if (shape->size() != 2 || (*shape)[0] < s_.vocab || (*shape)[1] != s_.hidden) {
      Fail(ErrorKind::kShapeMismatch, "export --to hf: '{}' has shape {}; vocab={} hidden={}",
           s_.prefix + key, ShapeToString(*shape), s_.vocab, s_.hidden);
    }
    out_.push_back({hf, {s_.vocab, s_.hidden}, {{s_.prefix + key, {0, 0}, {s_.vocab, s_.hidden}}}});
  }
  void Whole(const std::string& key, const std::string& hf, bool required = true) {
    const Shape* shape = Find(key);
    if (!shape) {
      if (required) Missing(key);
      return;
    }
    out_.push_back({hf, *shape, {{s_.prefix + key, Shape(shape->size(), 0), *shape}}});
  }
  // linear_qkv rows per query group [q of its heads, k, v] (Megatron's interleaving).
  void QkvRanges(const Found& k, Ranges& q, Ranges& kk, Ranges& v) const {
    const int64_t d = s_.head_dim(), qpg = s_.heads / s_.query_groups * d, per = qpg + 2 * d;
    ExpectRows(k, s_.query_groups * per,
               fmt::format("heads={} query_groups={} head_dim={}", s_.heads, s_.query_groups, d));
    for (int64_t g = 0; g < s_.query_groups; ++g) {
      q.push_back({g * per, qpg});
      kk.push_back({g * per + qpg, d});
      v.push_back({g * per + qpg + d, d});
    }
  }

  void LlamaLike(const std::string& type) {
    Vocab("embedding.word_embeddings.weight", "model.embed_tokens.weight");
    for (int64_t i = 0; i < s_.layers; ++i) {
      const std::string l = fmt::format("model.layers.{}.", i);
      LayerWhole(i, InputNorm(i, "weight"), l + "input_layernorm.weight", true);
      for (const char* suffix : {"weight", "bias"}) {
        auto k = LayerKey(i, std::string("self_attention.linear_qkv.") + suffix);
        if (!k) {
          if (std::string_view(suffix) == "weight") Missing("linear_qkv.weight");
          continue;
        }
        Ranges q, kk, v;
        QkvRanges(*k, q, kk, v);
        Take(l + "self_attn.q_proj." + suffix, *k, LeadOf(*k, i), q);
        Take(l + "self_attn.k_proj." + suffix, *k, LeadOf(*k, i), kk);
        Take(l + "self_attn.v_proj." + suffix, *k, LeadOf(*k, i), v);
      }
      LayerWhole(i, "self_attention.linear_proj.weight", l + "self_attn.o_proj.weight", true);
      LayerWhole(i, "self_attention.linear_proj.bias", l + "self_attn.o_proj.bias", false);
      LayerWhole(i, PreMlpNorm(i, "weight"), l + "post_attention_layernorm.weight", true);
      if (s_.experts > 0) {
        Experts(i, l, type);
        continue;
      }
      Mlp(i, "mlp.", l + "mlp.", "gate_proj", "up_proj", "down_proj");
    }
    Whole("decoder.final_layernorm.weight", "model.norm.weight");
    if (!s_.tied) Vocab("output_layer.weight", "lm_head.weight");
  }

  // A SwiGLU MLP at Megatron `from` (linear_fc1 [gate; up], linear_fc2) as HF names.
  void Mlp(int64_t i, const std::string& from, const std::string& to, const char* gate,
           const char* up, const char* down, int64_t ffn = 0) {
    const int64_t f = ffn > 0 ? ffn : s_.ffn;
    for (const char* suffix : {"weight", "bias"}) {
      const bool w = std::string_view(suffix) == "weight";
      auto k = LayerKey(i, from + "linear_fc1." + suffix);
      if (k) {
        if (s_.glu) {
          ExpectRows(*k, 2 * f, fmt::format("SwiGLU ffn={} (gate; up)", f));
          Take(to + gate + "." + suffix, *k, LeadOf(*k, i), {{0, f}});
          Take(to + up + "." + suffix, *k, LeadOf(*k, i), {{f, f}});
        } else {
          ExpectRows(*k, f, fmt::format("ffn={}", f));
          Take(to + up + "." + suffix, *k, LeadOf(*k, i), {{0, f}});
        }
      } else if (w) {
        Missing(fmt::format("decoder.layers[.{}].{}linear_fc1.weight", i, from));
      }
      LayerWhole(i, from + "linear_fc2." + suffix, to + down + "." + suffix, w);
    }
  }

  void Experts(int64_t i, const std::string& l, const std::string& type) {
    const bool mixtral = type == "mixtral";
    const std::string moe = l + (mixtral ? "block_sparse_moe." : "mlp.");
    LayerWhole(i, "mlp.router.weight", moe + "gate.weight", true);
    auto fc1 = ExpertKey(i, "linear_fc1.weight");
    auto fc2 = ExpertKey(i, "linear_fc2.weight");
    if (!fc1 || !fc2)
      Missing(fmt::format("decoder.layers[.{}].mlp.experts.linear_fc1/2.weight", i));
    const int64_t f = s_.ffn;
    ExpectRows(*fc1, 2 * f, fmt::format("SwiGLU moe_ffn={} (gate; up)", f));
    // One expert's tensors at a time (each HF tensor is one expert's rows).
    for (int64_t e = 0; e < s_.experts; ++e) {
      const std::string x = fmt::format("{}experts.{}.", moe, e);
      const std::vector<int64_t> lead1 = LeadOf(*fc1, i, e), lead2 = LeadOf(*fc2, i, e);
      Take(x + (mixtral ? "w1.weight" : "gate_proj.weight"), *fc1, lead1, {{0, f}});
      Take(x + (mixtral ? "w3.weight" : "up_proj.weight"), *fc1, lead1, {{f, f}});
      Take(x + (mixtral ? "w2.weight" : "down_proj.weight"), *fc2, lead2, {{0, RowsOf(*fc2)}});
    }
    if (!mixtral && f_.shared_experts) {
      Mlp(i, "mlp.shared_experts.", moe + "shared_expert.", "gate_proj", "up_proj", "down_proj",
          SharedFfn());
      LayerWhole(i, "mlp.shared_experts.gate_weight", moe + "shared_expert_gate.weight", true);
    }
  }

  // GPT-2 (modeling_gpt2.py): Conv1D weights [in, out] = Megatron's [out, in] transposed.
  void Gpt2() {
    Vocab("embedding.word_embeddings.weight", "transformer.wte.weight");
    Whole("embedding.position_embeddings.weight", "transformer.wpe.weight");
    for (int64_t i = 0; i < s_.layers; ++i) {
      const std::string l = fmt::format("transformer.h.{}.", i);
      LayerWhole(i, InputNorm(i, "weight"), l + "ln_1.weight", true);
      LayerWhole(i, InputNorm(i, "bias"), l + "ln_1.bias", true);
      // c_attn = [q | k | v] (all heads of each): Megatron's per-head [q, k, v] rows.
      for (const char* suffix : {"weight", "bias"}) {
        const bool w = std::string_view(suffix) == "weight";
        Found k = Need(i, std::string("self_attention.linear_qkv.") + suffix);
        Ranges q, kk, v;
        QkvRanges(k, q, kk, v);
        Ranges all = q;
        all.insert(all.end(), kk.begin(), kk.end());
        all.insert(all.end(), v.begin(), v.end());
        Take(l + "attn.c_attn." + suffix, k, LeadOf(k, i), all, w);
      }
      LayerWhole(i, "self_attention.linear_proj.weight", l + "attn.c_proj.weight", true, true);
      LayerWhole(i, "self_attention.linear_proj.bias", l + "attn.c_proj.bias", true);
      LayerWhole(i, PreMlpNorm(i, "weight"), l + "ln_2.weight", true);
      LayerWhole(i, PreMlpNorm(i, "bias"), l + "ln_2.bias", true);
      LayerWhole(i, "mlp.linear_fc1.weight", l + "mlp.c_fc.weight", true, true);
      LayerWhole(i, "mlp.linear_fc1.bias", l + "mlp.c_fc.bias", true);
      LayerWhole(i, "mlp.linear_fc2.weight", l + "mlp.c_proj.weight", true, true);
      LayerWhole(i, "mlp.linear_fc2.bias", l + "mlp.c_proj.bias", true);
    }
    Whole("decoder.final_layernorm.weight", "transformer.ln_f.weight");
    Whole("decoder.final_layernorm.bias", "transformer.ln_f.bias");
    if (!s_.tied) Vocab("output_layer.weight", "lm_head.weight");
  }

  const GptExportSpec& s_;
  const json* args_ = nullptr;
  std::map<std::string, Shape> stored_;
  std::vector<HfTensor> out_;
};

}  // namespace

HfArchitecture ChooseHfArchitecture(const GptExportSpec& spec,
                                    const std::vector<std::pair<std::string, Shape>>& stored) {
  return ArchPlanner(spec, stored).Choose();
}

HfExportPlan PlanHfExport(const GptExportSpec& spec,
                          const std::vector<std::pair<std::string, Shape>>& stored) {
  ArchPlanner planner(spec, stored);
  HfExportPlan plan;
  plan.architecture = planner.Choose();
  plan.tensors = planner.Plan(plan.architecture);
  return plan;
}

}  // namespace distckpt
