// RapidCheck generators of model-level cases with optimizer state: a GPT
// model generator section (layers, heads, hidden, ffn, vocab with padding,
// GLU, MoE experts, tied embeddings) that both topologies can shard, Adam
// state in one of Megatron's four formats (plain, fully_reshardable,
// fully_sharded_model_space, dp_reshardable) with random bucket padding,
// and one pair: save under A, load under B (tp, pp, dp, cp, ep).
// dp_reshardable keeps (TP, PP, EP), as Megatron requires, and changes
// DP x CP and, one pair in two, the padding divisor on load. Model-space
// formats (plain, fully_reshardable) get an FSDP layout (Megatron-FSDP or
// FSDP2) on save and/or load, with HSDP splits (dp_shard) one time in two
// and TP inside (FSDP+TP) whenever tp > 1.
//
// Thread-safety: generators are values; use them from one thread.
#ifndef DISTCKPT_PROPERTY_OPTIMIZER_GENERATORS_H_
#define DISTCKPT_PROPERTY_OPTIMIZER_GENERATORS_H_

#include <rapidcheck.h>

#include <string>
#include <vector>

#include "harness/spec/spec.h"

namespace distckpt {

// World sizes of both topologies at most `max_world`.
rc::Gen<Scenario> GenOptimizerScenario(int max_world);

// True when every model generator can shard under every topology the
// scenario names, and a dp_reshardable optimizer's pairs keep (TP, PP, EP)
// with EP dividing DP x CP: what the schema-aware shrinker must keep.
bool ModelsFit(const Scenario& scenario);

// The classes of the first pair: the format, tp/pp/dp/ep/world-size
// changing, ep>1, moe, glu, tied, bf16, bucketed, pad-divisor-changing,
// fsdp, fsdp-megatron, fsdp2, fsdp-layout-changing, hsdp, fsdp+tp, fsdp-experts.
std::vector<std::string> OptimizerClasses(const Scenario& scenario);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_OPTIMIZER_GENERATORS_H_
