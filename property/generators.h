// RapidCheck generators of training states and parallel layouts, expressed in
// the scenario schema (scenarios/README.md) so that any generated case, and in
// particular a shrunk counterexample, is a scenario file.
//
//  - GenTopology: tp, pp, dp, cp in 1..8 (odd sizes 3, 5, 6, 7 included), ep a
//    divisor of dp*cp, vpp, occasionally a non-default rank order; world size
//    at most `max_world`.
//  - GenTensorSpec: 0-d to 5-d global shapes (sizes 0 to a few hundred,
//    primes included), every dtype, regular grids on 0-3 axes with nested
//    splits, uneven torch.chunk splits (short and empty trailing shards),
//    flattened distributed-optimizer ranges (jittered boundaries), vocab
//    padding, prepended (stacked) axes over pp x vpp and dtype-converting
//    loads; expert tensors (ep, edp) when a topology has ep > 1. Every tensor is valid under every
//    given topology: even splits divide, flatten_jitter's constraints hold, and the padded volume
//    stays within `max_elements`.
//  - GenScenario: tensors, objects and, one case in three, an FSDP layout
//    (Megatron-FSDP buckets or FSDP2 torch.chunk rows over DP x CP) that
//    re-shards the eligible tensors (harness/expand/rank_state.h FsdpEligible).
//  - ReshardClasses: the classes of a case, for RC_TAG and class minimums.
//
// Thread-safety: generators are values; use them from one thread.
#ifndef DISTCKPT_PROPERTY_GENERATORS_H_
#define DISTCKPT_PROPERTY_GENERATORS_H_

#include <rapidcheck.h>

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

#include "harness/spec/spec.h"
#include "topology/topology.h"

namespace distckpt {

struct GenLimits {
  int max_world = 12;  // ranks of each topology
  int topologies = 2;  // how many topologies the tensors must fit
  int max_tensors = 3;
  int64_t max_elements = 2048;  // per tensor, padded, under any of the topologies
  bool objects = true;
  bool padding = true;
  bool load_dtype = true;
  bool fsdp = true;  // an FSDP layout (megatron, fsdp2) on save and/or load, one case in three each
  // Flattened ranges of torch.chunk splits (no regular grid): DCP cannot
  // store them (Megatron's N-D flattened layout needs a grid), so the DCP
  // property leaves them out.
  bool flatten_off_grid = true;
  // Prepended axes (a `stack`, Megatron's prepend_axis_num), one tensor in
  // five; half of them over pp x vpp when every topology's pp*vpp <= 8.
  bool stack = true;
  // A scenario "fp8" section (scaled FP8 tensors, property/fp8_generators.h),
  // one scenario in four.
  bool fp8_section = true;
  // Cases that fail today because of open findings (property/README.md);
  // turn them on once the findings are fixed.
  bool zero_volume = true;        // axes of size 0 (findings 2, 6-8, fixed)
  bool empty_flat_ranges = true;  // flattened ranges that are empty on some rank (finding 1, fixed)
};

// Uniform in [0, n) whatever RapidCheck's size (rc::gen::inRange starts near
// its minimum while the size is small), shrinking towards 0. Choices use it;
// sizes use inRange, where small ones first are welcome.
rc::Gen<uint64_t> Uniform(uint64_t n);
// Inside a property or rc::gen::exec: an index below n, and a coin that comes
// up true once in n throws; both shrink towards 0 / false.
size_t Choose(size_t n);
bool OneIn(size_t n);
// Inside a property or rc::gen::exec: one of `items`, uniform, shrinking towards the first.
template <typename T>
T OneOf(std::initializer_list<T> items) {
  return *(items.begin() + Choose(items.size()));
}

rc::Gen<Topology> GenTopology(int max_world);
rc::Gen<TensorSpec> GenTensorSpec(const std::string& key, const std::vector<Topology>& topologies,
                                  const GenLimits& limits);
// Tensors (keys t0, t1, ...) and objects (o0, ...) valid under each of
// `limits.topologies` generated topologies, listed in scenario.topologies.
// Shrinks stay valid (ScenarioFits): RapidCheck may keep an already shrunk
// tensor while it shrinks the topologies drawn before it.
rc::Gen<Scenario> GenScenario(const GenLimits& limits);
// A pair that saves under `save` and loads under `load`, expecting success.
PairSpec MakePair(const std::string& save, const std::string& load);
// GenScenario with one pair: topologies[0] saves, topologies[1] loads; with
// `limits.fsdp`, one pair in three loads under another FSDP layout (load_fsdp).
rc::Gen<Scenario> GenReshardScenario(const GenLimits& limits);

// Makes `spec` valid under every topology and within limits.max_elements
// (even splits divide their axes, jitter constraints hold); GenTensorSpec's last step.
void Fit(TensorSpec& spec, const std::vector<Topology>& topologies, const GenLimits& limits);

// True if `spec` is a tensor GenTensorSpec could have produced for these
// topologies and limits (valid under each of them: even splits divide, the
// jitter constraints hold, no excluded case); used to keep shrunk scenarios valid.
bool FitsAsGenerated(const TensorSpec& spec, const std::vector<Topology>& topologies,
                     const GenLimits& limits);

// FitsAsGenerated for every tensor of `scenario` and every topology its
// topology list and pairs name.
bool ScenarioFits(const Scenario& scenario, const GenLimits& limits);

// The classes of a scenario's first pair (uneven, empty-shard, flattened,
// padded, dtype-converting, fp8, world-size-changing, odd-size, ep>1, ...).
std::vector<std::string> ReshardClasses(const Scenario& scenario);

// Shows a scenario as its file's JSON in RapidCheck's counterexample output.
void showValue(const Scenario& scenario, std::ostream& os);

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_GENERATORS_H_
