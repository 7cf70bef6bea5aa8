#include "property/scenario_shrink.h"

#include <algorithm>
#include <exception>
#include <set>

#include "property/fp8_generators.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

std::vector<std::string> TopologyStrings(const Scenario& s) {
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const std::string& t : s.topologies) add(t);
  for (const PairSpec& p : s.pairs) {
    add(p.save);
    add(p.load);
    if (p.resave_load) add(*p.resave_load);
  }
  return out;
}

Scenario WithTopology(Scenario s, const std::string& from, const std::string& to) {
  for (std::string& t : s.topologies) {
    if (t == from) t = to;
  }
  for (PairSpec& p : s.pairs) {
    if (p.save == from) p.save = to;
    if (p.load == from) p.load = to;
    if (p.resave_load == from) p.resave_load = to;
  }
  return s;
}

std::vector<std::string> SimplerTopologies(const std::string& text) {
  const Topology t = Topology::Parse(text);
  std::vector<Topology> simpler{Topology()};
  for (int Topology::*size : {&Topology::tp, &Topology::pp, &Topology::dp, &Topology::cp}) {
    for (int to : {1, 2}) {
      if (t.*size <= to) continue;
      Topology c = t;
      c.*size = to;
      if (c.dp * c.cp % c.ep != 0) c.ep = 1;
      simpler.push_back(c);
    }
  }
  for (int Topology::*size : {&Topology::ep, &Topology::vpp}) {
    Topology c = t;
    c.*size = 1;
    simpler.push_back(c);
  }
  Topology ordered = t;
  ordered.order = Topology().order;
  simpler.push_back(ordered);
  std::vector<std::string> out;
  for (const Topology& c : simpler) {
    if (!(c == t)) out.push_back(c.ToString());
  }
  return out;
}

std::vector<TensorSpec> SimplerTensors(const TensorSpec& t) {
  std::vector<TensorSpec> out;
  auto variant = [&](auto&& change) {
    TensorSpec c = t;
    change(c);
    out.push_back(std::move(c));
  };
  if (!t.stack.empty()) {
    variant([](TensorSpec& c) {
      c.stack.clear();
      c.stack_over.reset();
    });
    if (t.stack_over) variant([](TensorSpec& c) { c.stack_over.reset(); });
    if (t.stack.size() > 1) variant([](TensorSpec& c) { c.stack.pop_back(); });
    for (int64_t to : std::set<int64_t>{1, t.stack[0] / 2}) {
      if (to >= 1 && to < t.stack[0]) variant([to](TensorSpec& c) { c.stack[0] = to; });
    }
  }
  if (t.load_dtype) variant([](TensorSpec& c) { c.load_dtype.reset(); });
  if (t.replica != ReplicaKind::kMegatron)
    variant([](TensorSpec& c) { c.replica = ReplicaKind::kMegatron; });
  if (t.pad_multiple > 0) variant([](TensorSpec& c) { c.pad_multiple = 0; });
  if (t.flatten_jitter) variant([](TensorSpec& c) { c.flatten_jitter = false; });
  if (t.flatten) {
    variant([](TensorSpec& c) {
      c.flatten.reset();
      c.flatten_jitter = false;
    });
  }
  if (t.split == SplitKind::kChunk) variant([](TensorSpec& c) { c.split = SplitKind::kEven; });
  if (t.dtype != DType::kF32) variant([](TensorSpec& c) { c.dtype = DType::kF32; });
  for (const auto& [axis, dims] : t.shard) {
    variant([axis = axis](TensorSpec& c) { c.shard.erase(axis); });
    for (size_t keep = 0; dims.size() > 1 && keep < dims.size(); ++keep) {
      variant([axis = axis, d = dims[keep]](TensorSpec& c) { c.shard[axis] = {d}; });
    }
  }
  for (size_t a = 0; a < t.shape.size(); ++a) {
    const int64_t size = t.shape[a];
    std::set<int64_t> smaller{1, size / 2, size / 3, size - 1};
    for (int64_t to : smaller) {
      if (to >= 1 && to < size) variant([a, to](TensorSpec& c) { c.shape[a] = to; });
    }
  }
  const int last = static_cast<int>(t.shape.size()) - 1;
  if (last >= 0 && !t.shard.count(last) && (t.pad_multiple == 0 || last > 0)) {
    variant([](TensorSpec& c) { c.shape.pop_back(); });
  }
  return out;
}

std::vector<Scenario> Candidates(const Scenario& s) {
  std::vector<Scenario> out;
  for (size_t i = 0; s.tensors.size() > 1 && i < s.tensors.size(); ++i) {
    Scenario c = s;
    c.tensors.erase(c.tensors.begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back(std::move(c));
  }
  for (size_t i = 0; i < s.objects.size(); ++i) {
    Scenario c = s;
    c.objects.erase(c.objects.begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back(std::move(c));
  }
  for (const std::string& topology : TopologyStrings(s)) {
    for (const std::string& simpler : SimplerTopologies(topology)) {
      out.push_back(WithTopology(s, topology, simpler));
    }
  }
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    for (TensorSpec& t : SimplerTensors(s.tensors[i])) {
      Scenario c = s;
      c.tensors[i] = std::move(t);
      out.push_back(std::move(c));
    }
  }
  if (s.fsdp != FsdpLayout::kNone) {
    Scenario c = s;
    c.fsdp = FsdpLayout::kNone;
    out.push_back(std::move(c));
  }
  if (!s.fp8.empty()) {
    Scenario c = s;
    c.fp8.clear();
    out.push_back(std::move(c));
  }
  for (size_t i = 0; s.fp8.size() > 1 && i < s.fp8.size(); ++i) {
    Scenario c = s;
    c.fp8.erase(c.fp8.begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back(std::move(c));
  }
  for (size_t i = 0; i < s.fp8.size(); ++i) {
    const Fp8TensorSpec& e = s.fp8[i];
    if (e.fp8.load_scale) {
      Scenario c = s;
      c.fp8[i].fp8.load_scale.reset();
      out.push_back(std::move(c));
    }
    if (e.fp8.scale != 1.0f) {
      Scenario c = s;
      c.fp8[i].fp8.scale = 1.0f;
      out.push_back(std::move(c));
    }
    for (TensorSpec& t : SimplerTensors(e.tensor)) {
      if (t.dtype != e.tensor.dtype || (t.load_dtype != e.tensor.load_dtype))
        continue;  // keep the fp8 request
      Scenario c = s;
      c.fp8[i].tensor = std::move(t);
      out.push_back(std::move(c));
    }
  }
  for (size_t i = 0; i < s.pairs.size(); ++i) {
    if (!s.pairs[i].load_fsdp) continue;
    Scenario c = s;
    c.pairs[i].load_fsdp.reset();
    out.push_back(std::move(c));
  }
  if (s.seed != 1) {
    Scenario c = s;
    c.seed = 1;
    out.push_back(std::move(c));
  }
  for (Scenario& c : out) RefreshFp8Expectations(c);  // saturation counts follow seed and shapes
  return out;
}

}  // namespace

ShrinkResult ShrinkScenario(const Scenario& failing, const std::string& failure,
                            const GenLimits& limits, const ScenarioCheck& check, int max_runs) {
  ShrinkResult r{failing, failure, 0, 0};
  auto fails = [&](const Scenario& c) {
    ++r.runs;
    std::optional<std::string> why;
    try {
      why = check(c);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why) return false;
    r.scenario = c;
    r.failure = *why;
    ++r.steps;
    return true;
  };
  for (bool progress = true; progress && r.runs < max_runs;) {
    progress = false;
    for (const Scenario& c : Candidates(r.scenario)) {
      if (r.runs >= max_runs) break;
      if (ScenarioFits(c, limits) && fails(c)) {
        progress = true;
        break;
      }
    }
  }
  return r;
}

}  // namespace distckpt
