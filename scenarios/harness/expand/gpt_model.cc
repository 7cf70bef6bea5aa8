#include "harness/expand/gpt_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "core/error.h"
#include "harness/expand/expand_tensor.h"
#include "harness/expand/values.h"

namespace distckpt {
namespace {

// What one pipeline stage holds.
struct Stage {
  bool embedding = false;
  bool loss = false;
  int64_t first_layer = 0;
  int64_t layer_count = 0;
};

std::vector<Stage> Stages(const GptConfig& c, const Topology& t) {
  const int count = t.pp * t.vpp;
  std::vector<Stage> stages(count);
  auto it = c.layouts.find(count);
  if (it == c.layouts.end()) {
    if (c.layers % count != 0) {
      Fail(ErrorKind::kInvalidArgument,
           "gpt layers={} cannot be split into pp*vpp={} pipeline stages (topology {}); give a "
           "pipeline_layout with {} stages",
           c.layers, count, t.ToString(), count);
    }
    for (int s = 0; s < count; ++s) stages[s].layer_count = c.layers / count;
    stages.front().embedding = true;
    stages.back().loss = true;
  } else {
    for (int s = 0; s < count; ++s) {
      for (const std::string& part : it->second[s]) {
        if (part == "embedding") stages[s].embedding = true;
        if (part == "loss") stages[s].loss = true;
        if (part == "decoder") ++stages[s].layer_count;
      }
    }
  }
  int64_t next = 0;
  for (Stage& s : stages) {
    s.first_layer = next;
    next += s.layer_count;
  }
  if (next != c.layers) {
    Fail(ErrorKind::kInvalidArgument,
         "gpt pipeline_layout for {} stages places {} decoder layers, the model has {}", count,
         next, c.layers);
  }
  return stages;
}

// Builds the params of one rank; keeps the per-rank context in one place.
class Expander {
 public:
  Expander(const GptConfig& c, const Topology& t, int rank)
      : c_(c),
        t_(t),
        rank_(rank),
        me_(t.Coords(rank)),
        dpcp_(me_.dp * t.cp + me_.cp),
        homogeneous_(c.homogeneous()),
        stages_(Stages(c, t)) {}

  std::vector<Param> Params() {
    const int64_t vp = PaddedVocab();
    for (int v = 0; v < t_.vpp; ++v) {
      const Stage& stage = stages_[v * t_.pp + me_.pp];
      if (stage.embedding) {
        Add("embedding.word_embeddings.weight", "embedding.word_embeddings.weight", {vp, c_.hidden},
            {{0, me_.tp, t_.tp}}, Replica(true), {c_.vocab, c_.hidden}, true);
        if (c_.position_embeddings > 0) {
          Add("embedding.position_embeddings.weight", "embedding.position_embeddings.weight",
              {c_.position_embeddings, c_.hidden}, {}, Replica(false), {}, false);
        }
      }
      for (int64_t g = stage.first_layer; g < stage.first_layer + stage.layer_count; ++g) Layer(g);
      if (stage.loss) {
        Add("decoder.final_layernorm.weight", "decoder.final_layernorm.weight", {c_.hidden}, {},
            Replica(false), {}, false);
        if (c_.norm_bias) {
          Add("decoder.final_layernorm.bias", "decoder.final_layernorm.bias", {c_.hidden}, {},
              Replica(false), {}, false);
        }
        if (!c_.tied) {
          Add("output_layer.weight", "output_layer.weight", {vp, c_.hidden}, {{0, me_.tp, t_.tp}},
              Replica(true), {c_.vocab, c_.hidden}, true);
        } else if (!stage.embedding) {
          // Tied output on a stage without the embedding: Megatron saves it
          // under the embedding's key as a non-main replica.
          ReplicaId replica = Replica(true);
          replica[0] = 1;
          Add("output_layer.weight", "embedding.word_embeddings.weight", {vp, c_.hidden},
              {{0, me_.tp, t_.tp}}, replica, {c_.vocab, c_.hidden}, true);
        }
      }
    }
    for (Param& p : params_) {
      for (ShardedTensor& piece : p.pieces) {
        auto renamed = c_.rename.find(piece.key.substr(c_.prefix.size()));
        if (renamed != c_.rename.end()) piece.key = c_.prefix + renamed->second;
      }
    }
    return std::move(params_);
  }

  std::vector<ObjectParam> Objects(uint64_t seed) {
    std::vector<ObjectParam> out;
    auto add = [&](const std::string& path, const std::string& key, Shape shape, Shape offset,
                   ReplicaId replica) {
      ShardedObject o;
      o.key = c_.prefix + key;
      o.global_shape = std::move(shape);
      o.global_offset = std::move(offset);
      o.replica_id = std::move(replica);
      o.data = ObjectValue(o.key, seed, o.global_offset);
      out.push_back({c_.prefix + path, std::move(o)});
    };
    for (int v = 0; v < t_.vpp; ++v) {
      const Stage& stage = stages_[v * t_.pp + me_.pp];
      for (int64_t g = stage.first_layer; g < stage.first_layer + stage.layer_count; ++g) {
        for (const std::string& module : c_.extra_state) {
          if (module.starts_with(c_.expert_prefix)) {
            if (Dense(g) || !homogeneous_) continue;
            // Per (layer, global expert): Megatron's SequentialMLP offsets.
            auto [key, shape, offset] = LayerKey(g, module + "._extra_state");
            const int64_t local = c_.experts / t_.ep;
            for (int64_t i = 0; i < local; ++i) {
              const int64_t e = me_.ep * local + i;
              Shape s = shape, o = offset;
              s.push_back(c_.experts);
              o.push_back(e);
              add(LayerPath(g, fmt::format("mlp.experts.local_experts.{}.{}._extra_state", e,
                                           module.substr(c_.expert_prefix.size()))),
                  key, s, o, {0, me_.tp, me_.edp});
            }
            continue;
          }
          if (!HasModule(g, module)) continue;
          auto [key, shape, offset] = LayerKey(g, module + "._extra_state");
          if (shape.empty()) {  // Megatron's _get_extra_state_offsets without sharded offsets
            shape = {1};
            offset = {0};
          }
          add(LayerPath(g, module + "._extra_state"), key, shape, offset, {0, me_.tp, dpcp_});
        }
      }
      if (stage.loss && c_.output_extra_state) {
        add("output_layer._extra_state", "output_layer._extra_state", {1}, {0}, {0, me_.tp, dpcp_});
      }
    }
    add("rng_state", "rng_state", {t_.pp, t_.tp}, {me_.pp, me_.tp}, {dpcp_});
    if (c_.rerun_state) {
      add("rerun_state_machine.sharded", "rerun_state_machine_state", {t_.world_size()}, {rank_},
          {0});
    }
    return out;
  }

 private:
  int64_t PaddedVocab() const {
    int64_t m = c_.vocab_multiple * t_.tp;
    return (c_.vocab + m - 1) / m * m;
  }

  // Megatron's (PP, TP, DP) replica ids; DP covers CP too.
  ReplicaId Replica(bool tp_sharded) const { return {0, tp_sharded ? 0 : me_.tp, dpcp_}; }
  ReplicaId ExpertReplica() const { return {0, 0, me_.edp}; }

  std::string LayerPath(int64_t g, const std::string& name) const {
    return fmt::format("decoder.layers.{}.{}", g, name);
  }

  // Homogeneous layers stack on a prepended layer axis; otherwise keys carry
  // the global layer number and no layer axis (Megatron's non-homogeneous /
  // MoE-frequency case). Returns (key, prepended shape, prepended offset).
  std::tuple<std::string, Shape, Shape> LayerKey(int64_t g, const std::string& name) const {
    if (homogeneous_) return {"decoder.layers." + name, {c_.layers}, {g}};
    return {fmt::format("decoder.layers.{}.{}", g, name), {}, {}};
  }

  // One parameter: `global` excludes prepended axes; offsets are
  // (local axis, rank offset, fragments) over it.
  void Add(const std::string& path, const std::string& key, Shape global,
           std::vector<RankOffset> offsets, ReplicaId replica, Shape logical, bool padded,
           Shape prepend_shape = {}, Shape prepend_offset = {}, int glu_axis = -1) {
    auto piece = [&](const std::vector<RankOffset>& local_offsets) {
      ShardedTensor t;
      t.key = c_.prefix + key;
      t.dtype = c_.dtype;
      t.global_shape = global;
      t.global_offset = Shape(global.size(), 0);
      t.local_shape = global;
      Shape fragments(global.size(), 1);
      for (const RankOffset& o : local_offsets) {
        t.local_shape[o.axis] = global[o.axis] / o.fragments;
        t.global_offset[o.axis] = o.rank_offset * t.local_shape[o.axis];
        fragments[o.axis] = o.fragments;
      }
      t.axis_fragmentations = fragments;
      t.replica_id = replica;
      t.allow_shape_mismatch = padded;
      return WithPrependedAxes(std::move(t), prepend_shape, prepend_offset);
    };
    Param param;
    param.path = c_.prefix + path;
    if (glu_axis >= 0) {
      // GLU fc1: local [W_tp; V_tp]; the global tensor is [W_0..W_{tp-1}, V_0..V_{tp-1}]
      // (Megatron's apply_swiglu_sharded_factory), so TP can change.
      global[glu_axis] *= 2;
      std::vector<RankOffset> w = offsets, v = offsets;
      for (size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i].axis != glu_axis) continue;
        w[i] = {glu_axis, offsets[i].rank_offset, 2 * offsets[i].fragments};
        v[i] = {glu_axis, offsets[i].rank_offset + offsets[i].fragments, 2 * offsets[i].fragments};
      }
      param.pieces = {piece(w), piece(v)};
    } else {
      param.pieces = {piece(offsets)};
    }
    param.logical_shape = param.pieces.front().global_shape;
    if (!logical.empty()) {
      std::copy(logical.begin(), logical.end(),
                param.logical_shape.begin() + static_cast<std::ptrdiff_t>(prepend_shape.size()));
    }
    params_.push_back(std::move(param));
  }

  void LayerParam(int64_t g, const std::string& name, Shape global, std::vector<RankOffset> offsets,
                  ReplicaId replica, int glu_axis = -1) {
    auto [key, prepend_shape, prepend_offset] = LayerKey(g, name);
    Add(LayerPath(g, name), key, std::move(global), std::move(offsets), std::move(replica), {},
        false, prepend_shape, prepend_offset, glu_axis);
  }

  bool Dense(int64_t g) const { return c_.experts == 0 || !c_.moe_layers[g]; }

  // Whether layer g has `module` (a MoE layer has no mlp.linear_fc1/fc2, a dense one no experts).
  bool HasModule(int64_t g, const std::string& module) const {
    return Dense(g) ? !module.starts_with(c_.expert_prefix) : !module.starts_with("mlp.linear_fc");
  }

  // A layer norm: `unfused` ("input_layernorm.") or, with fused_norms, the
  // name inside the linear that follows it (`fused`, "" if none).
  void Norm(int64_t g, const std::string& unfused, const std::string& fused) {
    const std::string base = c_.fused_norms && !fused.empty() ? fused : unfused;
    LayerParam(g, base + "weight", {c_.hidden}, {}, Replica(false));
    if (c_.norm_bias) LayerParam(g, base + "bias", {c_.hidden}, {}, Replica(false));
  }

  void Layer(int64_t g) {
    const int64_t h = c_.hidden, f = c_.ffn;
    const int tp = me_.tp, TP = t_.tp;
    const bool bias = c_.linear_bias != 0;      // proj and fc2
    const bool qkv_bias = bias || c_.qkv_bias;  // linear_qkv
    const bool fc1_bias = c_.linear_bias == 1;  // only with every linear biased
    Norm(g, "input_layernorm.", "self_attention.linear_qkv.layer_norm_");
    // Grouped-query attention: per query group [q of its heads, k, v] (Megatron's order).
    const int64_t qkv = c_.query_groups > 0 ? h + 2 * c_.query_groups * (h / c_.heads) : 3 * h;
    LayerParam(g, "self_attention.linear_qkv.weight", {qkv, h}, {{0, tp, TP}}, Replica(true));
    if (qkv_bias)
      LayerParam(g, "self_attention.linear_qkv.bias", {qkv}, {{0, tp, TP}}, Replica(true));
    LayerParam(g, "self_attention.linear_proj.weight", {h, h}, {{1, tp, TP}}, Replica(true));
    if (bias) LayerParam(g, "self_attention.linear_proj.bias", {h}, {}, Replica(false));
    const int glu = c_.glu ? 0 : -1;
    if (Dense(g)) {
      Norm(g, "pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_");
      LayerParam(g, "mlp.linear_fc1.weight", {f, h}, {{0, tp, TP}}, Replica(true), glu);
      if (fc1_bias) LayerParam(g, "mlp.linear_fc1.bias", {f}, {{0, tp, TP}}, Replica(true), glu);
      LayerParam(g, "mlp.linear_fc2.weight", {h, f}, {{1, tp, TP}}, Replica(true));
      if (bias) LayerParam(g, "mlp.linear_fc2.bias", {h}, {}, Replica(false));
      return;
    }
    // Megatron-Core's local spec keeps the fused name before an MoE layer too.
    Norm(g, "pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_");
    LayerParam(g, "mlp.router.weight", {c_.experts, h}, {}, Replica(false));
    if (c_.router_bias) LayerParam(g, "mlp.router.bias", {c_.experts}, {}, Replica(false));
    // SequentialMLP experts: a second prepended axis with the global expert index.
    const int64_t local = c_.experts / t_.ep;
    ReplicaId expert_replicated = ExpertReplica();
    expert_replicated[1] = me_.tp;
    for (int64_t i = 0; i < local; ++i) {
      const int64_t e = me_.ep * local + i;
      for (const char* name :
           {"linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight", "linear_fc2.bias"}) {
        const bool is_bias = std::string_view(name).ends_with(".bias");
        if (is_bias && c_.linear_bias != 1) continue;
        auto [key, prepend_shape, prepend_offset] = LayerKey(g, c_.expert_prefix + name);
        prepend_shape.push_back(c_.experts);
        prepend_offset.push_back(e);
        bool fc1 = std::string_view(name).starts_with("linear_fc1");
        Shape shape = fc1 ? Shape{f, h} : Shape{h, f};
        std::vector<RankOffset> split = {{fc1 ? 0 : 1, tp, TP}};
        ReplicaId replica = ExpertReplica();
        if (is_bias) {
          shape = {fc1 ? f : h};
          if (!fc1) {  // row-parallel bias: whole on every TP rank
            split.clear();
            replica = expert_replicated;
          } else {
            split = {{0, tp, TP}};
          }
        }
        Add(LayerPath(g, fmt::format("mlp.experts.local_experts.{}.{}", e, name)), key, shape,
            split, replica, {}, false, prepend_shape, prepend_offset, fc1 ? glu : -1);
      }
    }
  }

  const GptConfig& c_;
  const Topology& t_;
  int rank_;
  RankCoords me_;
  int64_t dpcp_;
  bool homogeneous_;  // O(layers) to compute: once, not per key
  std::vector<Stage> stages_;
  std::vector<Param> params_;
};

}  // namespace

void CheckGptTopology(const GptConfig& c, const Topology& t) {
  auto divides = [&](const char* what, int64_t value, const char* dim, int64_t size) {
    if (value % size != 0) {
      Fail(ErrorKind::kInvalidArgument, "gpt {}={} is not divisible by {}={} (topology {})", what,
           value, dim, size, t.ToString());
    }
  };
  divides("hidden", c.hidden, "tp", t.tp);
  divides("heads", c.heads, "tp", t.tp);
  if (c.query_groups > 0) {
    divides("query_groups", c.query_groups, "tp", t.tp);
    divides("heads", c.heads, "query_groups", c.query_groups);
    divides("hidden", c.hidden, "heads", c.heads);
  }
  divides("ffn", c.ffn, "tp", t.tp);
  if (c.experts > 0) divides("experts", c.experts, "ep", t.ep);
  Stages(c, t);  // layer split or layout checks
}

std::vector<Param> ExpandGptParams(const GptConfig& config, const Topology& topology, int rank) {
  CheckGptTopology(config, topology);
  return Expander(config, topology, rank).Params();
}

std::vector<ObjectParam> ExpandGptObjects(const GptConfig& config, uint64_t seed,
                                          const Topology& topology, int rank) {
  CheckGptTopology(config, topology);
  return Expander(config, topology, rank).Objects(seed);
}

}  // namespace distckpt
