#include "property/optimizer_generators.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "harness/expand/gpt_model.h"
#include "property/generators.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

using nlohmann::json;

// Inside rc::gen::exec: tp, pp, dp, cp, ep (a divisor of dp*cp, one layout
// in three) and vpp (one in four) with at most `max_world` ranks.
Topology GenLayout(int max_world) {
  Topology t;
  do {
    t.tp = OneOf({1, 2, 3, 4});
    t.pp = OneOf({1, 2, 3});
    t.dp = OneOf({1, 2, 3, 4});
    t.cp = OneOf({1, 2});
  } while (t.world_size() > max_world);
  std::vector<int> eps;
  for (int e = 1; e <= t.dp * t.cp; ++e) {
    if ((t.dp * t.cp) % e == 0) eps.push_back(e);
  }
  if (OneIn(3)) t.ep = eps[Choose(eps.size())];
  if (t.pp > 1 && OneIn(4)) t.vpp = 2;
  return t;
}

// dp_reshardable: the same (TP, PP, EP, VPP), another DP x CP that EP divides.
Topology GenDpChange(const Topology& src, int max_world) {
  std::vector<Topology> options;
  for (int cp : {1, 2}) {
    for (int dp = 1; dp <= 4; ++dp) {
      Topology t = src;
      t.dp = dp;
      t.cp = cp;
      if (t.world_size() <= max_world && (dp * cp) % src.ep == 0) options.push_back(t);
    }
  }
  return options[Choose(options.size())];  // src itself is among them
}

int64_t PadDivisor() { return OneOf<int64_t>({128, 8, 40, 44, 56, 64}); }

// An FSDP layout name, "none" one time in `none_weight + 2`.
std::string PickLayout(unsigned none_weight) {
  if (Choose(none_weight + 2) < none_weight) return "none";
  return OneOf<std::string>({"megatron", "fsdp2"});
}

// HSDP one time in two: dp_shard a proper divisor of dp (1 = replicate
// only). Dense parameters only: HSDP of experts (ep > 1) is refused.
void MaybeHsdp(Topology& t) {
  if (t.ep > 1 || t.dp < 2 || !OneIn(2)) return;
  std::vector<int> divisors;
  for (int d = 1; d < t.dp; ++d) {
    if (t.dp % d == 0) divisors.push_back(d);
  }
  t.dp_shard = divisors[Choose(divisors.size())];
}

}  // namespace

rc::Gen<Scenario> GenOptimizerScenario(int max_world) {
  return rc::gen::exec([max_world] {
    const std::string format = OneOf<std::string>(
        {"plain", "fully_reshardable", "fully_sharded_model_space", "dp_reshardable"});
    Topology src = GenLayout(max_world);
    Topology dst = format == "dp_reshardable" ? GenDpChange(src, max_world) : GenLayout(max_world);
    // FSDP (model-space formats only): the parameters and their Adam state
    // sharded by a layout on save and by the same or another one on load.
    const bool model_space = format == "plain" || format == "fully_reshardable";
    const std::string save_fsdp = model_space ? PickLayout(2) : "none";
    const std::string load_fsdp = model_space ? PickLayout(save_fsdp == "none" ? 2 : 1) : "none";
    if (save_fsdp != "none") MaybeHsdp(src);
    if (load_fsdp != "none") MaybeHsdp(dst);
    const int tp = std::lcm(src.tp, dst.tp);
    const int stages = std::lcm(src.pp * src.vpp, dst.pp * dst.vpp);
    const int ep = std::lcm(src.ep, dst.ep);
    const int heads = tp * OneOf({1, 2});
    json model = {{"kind", "gpt"},
                  {"layers", stages * OneOf({1, 2})},
                  {"heads", heads},
                  {"hidden", heads * 2 * OneOf({1, 2, 3})},
                  {"ffn", tp * 2 * OneOf({1, 2, 3, 4, 5})},
                  {"vocab", *rc::gen::inRange(17, 121)},
                  {"vocab_multiple", OneOf({8, 16})},
                  {"dtype", OneIn(3) ? "f32" : "bf16"},
                  {"glu", OneIn(2)},
                  {"tied", OneIn(4)}};
    if (ep > 1 || OneIn(3)) {
      model["experts"] = ep * OneOf({1, 2});
      model["moe_layer_freq"] = OneOf({1, 2});
    }
    json optimizer = {{"kind", "adam"},
                      {"format", format},
                      {"step", *rc::gen::inRange(1, 101)},
                      {"pad_divisor", PadDivisor()},
                      {"bucket_numel", OneIn(2) ? 0 : *rc::gen::inRange(200, 3001)}};
    json pair = {{"save", src.ToString()}, {"load", dst.ToString()}};
    if (format != "plain" && format != "fully_reshardable" && OneIn(2)) {
      pair["load_optimizer"] = {{"pad_divisor", PadDivisor()}};
    }
    if (load_fsdp != save_fsdp) pair["load_fsdp"] = {{"layout", load_fsdp}};
    json scenario = {{"name", "optimizer-property"},
                     {"seed", *rc::gen::inRange(1, 1000)},
                     {"model", model},
                     {"optimizer", optimizer},
                     {"topologies", {src.ToString(), dst.ToString()}},
                     {"pairs", json::array({pair})}};
    if (save_fsdp != "none") scenario["fsdp"] = {{"layout", save_fsdp}};
    return Scenario::FromJson(scenario, "generated");
  });
}

bool ModelsFit(const Scenario& s) {
  for (const PairSpec& pair : s.pairs) {
    const Topology a = Topology::Parse(pair.save), b = Topology::Parse(pair.load);
    for (const GptConfig& model : s.models) {
      for (const Topology& t : {a, b}) {
        try {
          CheckGptTopology(model, t);
        } catch (const CheckpointError&) {
          return false;
        }
      }
    }
    if (s.optimizer && s.optimizer->format == OptimFormat::kDpReshardable &&
        (a.tp != b.tp || a.pp != b.pp || a.ep != b.ep || a.vpp != b.vpp ||
         (b.dp * b.cp) % b.ep != 0)) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> OptimizerClasses(const Scenario& s) {
  std::vector<std::string> tags;
  if (s.optimizer) tags.emplace_back(OptimFormatName(s.optimizer->format));
  if (s.pairs.empty() || s.models.empty()) return tags;
  const PairSpec& pair = s.pairs[0];
  const Topology a = Topology::Parse(pair.save), b = Topology::Parse(pair.load);
  auto tag = [&](bool on, const char* name) {
    if (on) tags.emplace_back(name);
  };
  tag(a.tp != b.tp, "tp-changing");
  tag(a.pp != b.pp || a.vpp != b.vpp, "pp-changing");
  tag(a.dp * a.cp != b.dp * b.cp, "dp-cp-changing");
  tag(a.ep != b.ep, "ep-changing");
  tag(a.world_size() != b.world_size(), "world-size-changing");
  tag(a.ep > 1 || b.ep > 1, "ep>1");
  tag(a.vpp > 1 || b.vpp > 1, "vpp>1");
  tag(a.cp > 1 || b.cp > 1, "cp>1");
  tag(a == b, "same-topology");
  const GptConfig& m = s.models[0];
  tag(m.experts > 0, "moe");
  tag(m.glu, "glu");
  tag(m.tied, "tied");
  tag(m.dtype == DType::kF32, "f32-params");
  tag(s.optimizer && s.optimizer->bucket_numel > 0, "bucketed");
  tag(!pair.load_optimizer.is_null(), "pad-divisor-changing");
  const FsdpLayout save = s.fsdp, load = pair.load_fsdp.value_or(s.fsdp);
  tag(save != FsdpLayout::kNone || load != FsdpLayout::kNone, "fsdp");
  tag(save == FsdpLayout::kMegatron || load == FsdpLayout::kMegatron, "fsdp-megatron");
  tag(save == FsdpLayout::kFsdp2 || load == FsdpLayout::kFsdp2, "fsdp2");
  tag(save != load, "fsdp-layout-changing");
  tag((save != FsdpLayout::kNone && a.dp_shard != 0) ||
          (load != FsdpLayout::kNone && b.dp_shard != 0),
      "hsdp");
  tag((save != FsdpLayout::kNone && a.tp > 1) || (load != FsdpLayout::kNone && b.tp > 1),
      "fsdp+tp");
  tag(m.experts > 0 && (save != FsdpLayout::kNone || load != FsdpLayout::kNone), "fsdp-experts");
  return tags;
}

}  // namespace distckpt
