#include "property/generators.h"

#include <algorithm>
#include <numeric>
#include <ostream>
#include <set>

#include "core/error.h"
#include "harness/expand/expand.h"
#include "harness/expand/rank_state.h"
#include "property/fp8_generators.h"
#include "property/optimizer_generators.h"

namespace distckpt {
namespace {

using rc::gen::inRange;

// An index drawn with `weights` that shrinks towards 0. RapidCheck's
// element/weightedElement do not shrink, so every choice goes through this
// and lists its simplest option first: counterexamples shrink to it.
rc::Gen<size_t> WeightedIndex(std::vector<size_t> weights) {
  return rc::Gen<size_t>([weights](const rc::Random& random, int) {
    uint64_t r =
        rc::Random(random).next() % std::accumulate(weights.begin(), weights.end(), size_t{0});
    size_t i = 0;
    while (r >= weights[i]) r -= weights[i++];
    return rc::shrinkable::shrinkRecur(i,
                                       [](size_t x) { return rc::shrink::towards<size_t>(x, 0); });
  });
}

// Inside rc::gen::exec: one of `choices` by weight, shrinking towards the first.
template <typename T>
T Pick(std::initializer_list<std::pair<size_t, T>> choices) {
  std::vector<size_t> weights;
  for (const auto& c : choices) weights.push_back(c.first);
  return (choices.begin() + *WeightedIndex(weights))->second;
}

template <typename T>
T PickOf(const std::vector<T>& items) {
  return items[Choose(items.size())];
}

int64_t Parts(const std::vector<MeshDim>& dims, const Topology& topo) {
  int64_t parts = 1;
  for (MeshDim d : dims) parts *= topo.Size(d);
  return parts;
}

int64_t AxisParts(const TensorSpec& t, int axis, const Topology& topo) {
  auto it = t.shard.find(axis);
  return it == t.shard.end() ? 1 : Parts(it->second, topo);
}

bool Padded(const TensorSpec& t, int axis) { return t.pad_multiple > 0 && axis == 0; }

// Axis size under `topo`, vocab padding included (as ExpandTensor pads).
int64_t PaddedSize(const TensorSpec& t, int axis, const Topology& topo) {
  if (!Padded(t, axis)) return t.shape[axis];
  const int64_t multiple = t.pad_multiple * AxisParts(t, axis, topo);
  return (t.shape[axis] + multiple - 1) / multiple * multiple;
}

int64_t MaxVolume(const TensorSpec& t, const std::vector<Topology>& topos) {
  int64_t most = 0;
  for (const Topology& topo : topos) {
    int64_t volume = 1;
    for (size_t a = 0; a < t.shape.size(); ++a) volume *= PaddedSize(t, static_cast<int>(a), topo);
    most = std::max(most, volume);
  }
  return most;
}

// What every topology's even split of `axis` must divide (1 if any size fits).
int64_t EvenMultiple(const TensorSpec& t, int axis, const std::vector<Topology>& topos) {
  if (t.split != SplitKind::kEven || !t.shard.count(axis) || Padded(t, axis)) return 1;
  int64_t lcm = 1;
  for (const Topology& topo : topos) lcm = std::lcm(lcm, AxisParts(t, axis, topo));
  return lcm;
}

// Inside rc::gen::exec: an axis size, small ones most often.
int64_t AxisSize(bool zero) {
  static const std::vector<int64_t> odd{3, 5, 6, 7};
  static const std::vector<int64_t> primes{11, 13, 17, 19, 23, 29, 31, 37,  41,  43,  47,
                                           53, 61, 67, 71, 79, 89, 97, 101, 127, 131, 251};
  switch (*WeightedIndex({12, 4, 3, 2, zero ? 1u : 0u})) {
    case 0:
      return *inRange<int64_t>(1, 9);
    case 1:
      return PickOf(odd);
    case 2:
      return PickOf(primes);
    case 3:
      return *inRange<int64_t>(9, 301);
    default:
      return 0;
  }
}

DType PickDType() {
  return Pick<DType>({{4, DType::kF32},
                      {3, DType::kBF16},
                      {2, DType::kF16},
                      {1, DType::kF64},
                      {2, DType::kF8E4M3FN},
                      {2, DType::kF8E5M2},
                      {1, DType::kI8},
                      {1, DType::kI16},
                      {1, DType::kI32},
                      {1, DType::kI64},
                      {1, DType::kU8},
                      {1, DType::kBool}});
}

// Inside rc::gen::exec: an FSDP layout (kNone only when `none`).
FsdpLayout PickFsdpLayout(bool none) {
  return Pick<FsdpLayout>(
      {{none ? 1u : 0u, FsdpLayout::kNone}, {1, FsdpLayout::kMegatron}, {1, FsdpLayout::kFsdp2}});
}

std::vector<std::vector<MeshDim>> AllOrders() {
  std::vector<MeshDim> order{MeshDim::kTp, MeshDim::kCp, MeshDim::kDp, MeshDim::kPp};
  std::vector<std::vector<MeshDim>> all;
  do {
    all.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return all;
}

}  // namespace

// Makes `t` valid under every topology and within `max_elements`: rounds
// evenly split sizes up to a multiple of their parts, then halves the
// largest shrinkable axis (dropping an axis's sharding or the padding when
// nothing else can shrink), then drops flatten_jitter where its
// constraints (Megatron's test_flattened_resharding ranges) do not hold, and
// the flattening where a rank's range would be empty (unless allowed).
void Fit(TensorSpec& t, const std::vector<Topology>& topos, const GenLimits& limits) {
  const int rank = static_cast<int>(t.shape.size());
  if (t.stack_over) {  // the stack's first axis divides into every topology's virtual stages
    int64_t stages = 1;
    for (const Topology& topo : topos) stages = std::lcm(stages, int64_t{topo.pp} * topo.vpp);
    if (stages > 8) {
      t.stack_over.reset();
    } else {
      t.stack[0] = (t.stack[0] + stages - 1) / stages * stages;
    }
  }
  const int64_t max_elements = std::max<int64_t>(1, limits.max_elements / Volume(t.stack));
  auto round_up = [&] {  // even splits divide their axes
    for (int a = 0; a < rank; ++a) {
      const int64_t m = EvenMultiple(t, a, topos);
      t.shape[a] = (t.shape[a] + m - 1) / m * m;
    }
  };
  round_up();
  while (MaxVolume(t, topos) > max_elements) {
    int best = -1;
    for (int a = 0; a < rank; ++a) {
      const int64_t floor = Padded(t, a) ? 1 : EvenMultiple(t, a, topos);
      if (t.shape[a] > floor && (best < 0 || t.shape[a] > t.shape[best])) best = a;
    }
    if (best >= 0) {
      const int64_t m = Padded(t, best) ? 1 : EvenMultiple(t, best, topos);
      t.shape[best] = std::max(m, t.shape[best] / 2 / m * m);
    } else if (t.pad_multiple > 0) {
      // Padded axes may have been halved below their split's multiple: without
      // the padding they must divide again (an axis of 1 split over tp=6 did not).
      t.pad_multiple = 0;
      round_up();
    } else {  // every axis sits at its split's minimum: unshard the widest
      int widest = 0;
      for (int a = 1; a < rank; ++a) {
        if (EvenMultiple(t, a, topos) > EvenMultiple(t, widest, topos)) widest = a;
      }
      t.shard.erase(widest);
    }
  }
  if (t.flatten_jitter) {
    for (const Topology& topo : topos) {
      int64_t numel = 1;
      for (int a = 0; a < rank; ++a) numel *= PaddedSize(t, a, topo) / AxisParts(t, a, topo);
      const int64_t parts = topo.Size(*t.flatten);
      if (numel % parts != 0 || numel / parts < parts - 1) t.flatten_jitter = false;
    }
  }
  if (t.flatten && !limits.empty_flat_ranges) {
    for (const Topology& topo : topos) {
      for (int r = 0; r < topo.world_size(); ++r) {
        for (const ShardedTensor& shard : ExpandTensor(t, topo, r)) {
          if (shard.LocalNumel() > 0) continue;
          t.flatten.reset();
          t.flatten_jitter = false;
          return;
        }
      }
    }
  }
}

rc::Gen<uint64_t> Uniform(uint64_t n) {
  return rc::Gen<uint64_t>([n](const rc::Random& random, int) {
    return rc::shrinkable::shrinkRecur(rc::Random(random).next() % n, [](uint64_t x) {
      return rc::shrink::towards<uint64_t>(x, 0);
    });
  });
}

size_t Choose(size_t n) { return *Uniform(n) % n; }  // a replayed choice may exceed a smaller n

bool OneIn(size_t n) { return Pick<bool>({{n - 1, false}, {1, true}}); }

rc::Gen<Topology> GenTopology(int max_world) {
  return rc::gen::exec([max_world] {
    auto size = [] {
      return Pick<int>({{10, 1}, {6, 2}, {3, 3}, {3, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}});
    };
    Topology t;
    t.tp = size();
    t.pp = size();
    t.dp = size();
    t.cp = Pick<int>({{6, 1}, {3, 2}, {1, 3}});
    while (t.world_size() > max_world) {  // lower the largest factor until the world fits
      int* largest = &t.tp;
      for (int* f : {&t.pp, &t.dp, &t.cp}) {
        if (*f > *largest) largest = f;
      }
      *largest = std::max(1, max_world / (t.world_size() / *largest));
    }
    std::vector<int> divisors;
    for (int d = 1; d <= t.dp * t.cp; ++d) {
      if (t.dp * t.cp % d == 0) divisors.push_back(d);
    }
    t.ep = OneIn(3) ? PickOf(divisors) : 1;
    t.vpp = Pick<int>({{8, 1}, {2, 2}, {1, 3}});
    if (OneIn(8)) {
      static const std::vector<std::vector<MeshDim>> orders = AllOrders();
      t.order = PickOf(orders);
    }
    return t;
  });
}

rc::Gen<TensorSpec> GenTensorSpec(const std::string& key, const std::vector<Topology>& topos,
                                  const GenLimits& limits) {
  return rc::gen::exec([key, topos, limits] {
    TensorSpec t;
    t.key = key;
    const bool any_ep =
        std::any_of(topos.begin(), topos.end(), [](const Topology& x) { return x.ep > 1; });
    std::vector<MeshDim> pool{MeshDim::kTp, MeshDim::kPp, MeshDim::kDp, MeshDim::kCp};
    if (any_ep && OneIn(3))
      pool = {MeshDim::kTp, MeshDim::kPp, MeshDim::kEp, MeshDim::kEdp};  // expert
    const int rank = Pick<int>({{4, 1}, {5, 2}, {1, 0}, {3, 3}, {1, 4}, {1, 5}});
    for (int a = 0; a < rank; ++a) t.shape.push_back(AxisSize(limits.zero_volume));
    for (int a = 0; a < rank && !pool.empty(); ++a) {
      const int dims = Pick<int>({{5, 0}, {4, 1}, {1, 2}});
      for (int i = 0; i < dims && !pool.empty(); ++i) {
        const size_t pick = Choose(pool.size());
        t.shard[a].push_back(pool[pick]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
    t.split = OneIn(3) ? SplitKind::kChunk : SplitKind::kEven;
    if (!pool.empty() && OneIn(4)) {
      t.flatten = PickOf(pool);
      if (!limits.flatten_off_grid) t.split = SplitKind::kEven;
      t.flatten_jitter = t.split == SplitKind::kEven && OneIn(2);
    }
    if (limits.padding && rank >= 1 && OneIn(6)) {
      t.pad_multiple = Pick<int64_t>({{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}, {1, 8}});
    }
    if (OneIn(6))
      t.replica = Pick<ReplicaKind>({{1, ReplicaKind::kReversed}, {1, ReplicaKind::kFlat}});
    if (limits.stack && OneIn(5)) {
      t.stack = {*inRange<int64_t>(1, 5)};
      if (OneIn(4)) t.stack.push_back(*inRange<int64_t>(1, 4));
      bool pp_free = t.flatten != MeshDim::kPp;
      for (const auto& [axis, dims] : t.shard)
        pp_free = pp_free && !std::count(dims.begin(), dims.end(), MeshDim::kPp);
      if (pp_free && OneIn(2)) t.stack_over = MeshDim::kPp;
    }
    t.dtype = PickDType();
    if (limits.load_dtype && OneIn(6)) {
      DType other = PickDType();
      if (other != t.dtype) t.load_dtype = other;
    }
    Fit(t, topos, limits);
    return t;
  });
}

rc::Gen<Scenario> GenScenario(const GenLimits& limits) {
  auto fits = [limits](const Scenario& s) { return ScenarioFits(s, limits); };
  return rc::gen::suchThat(
      rc::gen::exec([limits] {
        Scenario s;
        s.name = "property";
        s.seed = *inRange<uint64_t>(1, 1000);
        std::vector<Topology> topos;
        for (int i = 0; i < limits.topologies; ++i) {
          topos.push_back(i > 0 && OneIn(8) ? topos.back() : *GenTopology(limits.max_world));
          s.topologies.push_back(topos.back().ToString());
        }
        const int tensors = *inRange(1, limits.max_tensors + 1);
        for (int i = 0; i < tensors; ++i) {
          s.tensors.push_back(*GenTensorSpec("t" + std::to_string(i), topos, limits));
        }
        if (limits.fsdp && OneIn(3)) s.fsdp = PickFsdpLayout(false);
        // fp8 tensors cannot be combined with fsdp (the scenario parser refuses it).
        if (limits.fp8_section && s.fsdp == FsdpLayout::kNone && OneIn(4))
          s.fp8 = GenFp8Section(topos, s.seed, limits);
        const int objects = limits.objects ? Pick<int>({{4, 0}, {2, 1}, {1, 2}}) : 0;
        for (int i = 0; i < objects; ++i) {
          ObjectSpec o{"o" + std::to_string(i), {}};
          for (MeshDim d : {MeshDim::kPp, MeshDim::kTp, MeshDim::kDp, MeshDim::kCp}) {
            if (OneIn(3)) o.per.push_back(d);
          }
          s.objects.push_back(o);
        }
        return s;
      }),
      fits);
}

bool FitsAsGenerated(const TensorSpec& spec, const std::vector<Topology>& topos,
                     const GenLimits& limits) {
  if (spec.pad_multiple > 0 && spec.shape.empty()) return false;
  if (!limits.zero_volume && Volume(spec.shape) == 0) return false;
  if (!limits.flatten_off_grid && spec.flatten && spec.split == SplitKind::kChunk) return false;
  TensorSpec fitted = spec;
  try {
    Fit(fitted, topos, limits);
  } catch (const CheckpointError&) {  // a shrunk spec Fit cannot even expand
    return false;
  }
  return TensorSpecToJson(fitted) == TensorSpecToJson(spec);
}

bool ScenarioFits(const Scenario& s, const GenLimits& limits) {
  std::vector<Topology> topos;
  auto add = [&](const std::string& text) {
    const Topology t = Topology::Parse(text);
    if (std::find(topos.begin(), topos.end(), t) == topos.end()) topos.push_back(t);
  };
  for (const std::string& t : s.topologies) add(t);
  for (const PairSpec& p : s.pairs) {
    add(p.save);
    add(p.load);
  }
  for (const Fp8TensorSpec& e : s.fp8) {
    if (!limits.fp8_section || !FitsAsGenerated(e.tensor, topos, limits)) return false;
    if (e.fp8.expect_saturated && *e.fp8.expect_saturated != ExpectedSaturation(s.seed, e))
      return false;
  }
  return ModelsFit(s) && std::all_of(s.tensors.begin(), s.tensors.end(), [&](const TensorSpec& t) {
           return FitsAsGenerated(t, topos, limits);
         });
}

PairSpec MakePair(const std::string& save, const std::string& load) {
  PairSpec pair;
  pair.save = save;
  pair.load = load;
  return pair;
}

rc::Gen<Scenario> GenReshardScenario(const GenLimits& limits) {
  return rc::gen::exec([limits] {
    Scenario s = *GenScenario(limits);
    s.pairs = {MakePair(s.topologies[0], s.topologies[1])};
    if (limits.fsdp && s.fp8.empty() && OneIn(3)) {
      const FsdpLayout load = PickFsdpLayout(true);
      if (load != s.fsdp) s.pairs[0].load_fsdp = load;
    }
    return s;
  });
}

std::vector<std::string> ReshardClasses(const Scenario& s) {
  const Topology a = Topology::Parse(s.pairs.at(0).save);
  const Topology b = Topology::Parse(s.pairs.at(0).load);
  std::set<std::string> tags;
  auto odd = [](const Topology& t) {
    for (int v : {t.tp, t.pp, t.dp, t.cp, t.ep, t.vpp}) {
      if (v == 3 || v == 5 || v == 6 || v == 7) return true;
    }
    return false;
  };
  if (a.world_size() != b.world_size()) tags.insert("world-size-changing");
  if (a == b) tags.insert("same-topology");
  if (odd(a) || odd(b)) tags.insert("odd-size");
  if (a.ep > 1 || b.ep > 1) tags.insert("ep>1");
  if (a.cp > 1 || b.cp > 1) tags.insert("cp>1");
  if (a.vpp > 1 || b.vpp > 1) tags.insert("vpp>1");
  if (a.order != Topology().order || b.order != Topology().order) tags.insert("rank-order");
  if (!s.objects.empty()) tags.insert("objects");
  const FsdpLayout save_fsdp = s.fsdp;
  const FsdpLayout load_fsdp = s.pairs[0].load_fsdp.value_or(s.fsdp);
  const bool any_eligible = std::any_of(s.tensors.begin(), s.tensors.end(),
                                        [](const TensorSpec& t) { return FsdpEligible(t); });
  if (any_eligible) {
    for (FsdpLayout layout : {save_fsdp, load_fsdp}) {
      if (layout == FsdpLayout::kMegatron) tags.insert("fsdp-megatron");
      if (layout == FsdpLayout::kFsdp2) tags.insert("fsdp2");
    }
    if (save_fsdp != FsdpLayout::kNone || load_fsdp != FsdpLayout::kNone) tags.insert("fsdp");
    if (save_fsdp != load_fsdp) tags.insert("fsdp-layout-changing");
    // FSDP2 over more DP x CP ranks than a shard has rows: trailing ranks hold none.
    for (const auto& [topo, layout] : {std::pair{a, save_fsdp}, std::pair{b, load_fsdp}}) {
      if (layout == FsdpLayout::kNone) continue;
      for (const TensorSpec& t : s.tensors) {
        if (FsdpEligible(t) &&
            ExpandTensor(t, topo, 0).front().local_shape[0] < topo.dp * topo.cp) {  // no stack
          tags.insert(layout == FsdpLayout::kFsdp2 ? "fsdp2-more-ranks-than-rows"
                                                   : "fsdp-megatron-few-rows");
        }
      }
    }
  }
  for (const TensorSpec& t : s.tensors) {
    tags.insert("rank-" + std::to_string(t.shape.size()));
    if (t.flatten) tags.insert("flattened");
    if (t.flatten_jitter) tags.insert("flatten-jitter");
    if (t.pad_multiple > 0) tags.insert("padded");
    if (t.load_dtype) tags.insert("dtype-converting");
    if (t.replica != ReplicaKind::kMegatron)
      tags.insert("replica-" + std::string(ReplicaKindName(t.replica)));
    for (DType d : {t.dtype, t.load_dtype.value_or(t.dtype)}) {
      if (d == DType::kF8E4M3FN || d == DType::kF8E5M2) tags.insert("fp8");
    }
    if (Volume(t.shape) == 0) tags.insert("zero-volume");
    if (!t.stack.empty()) tags.insert("stacked");
    if (t.stack.size() > 1) tags.insert("stacked-2d");
    if (t.stack_over) {
      tags.insert("stacked-over-pp");
      if (a.pp != b.pp || a.vpp != b.vpp) tags.insert("stack-layers-moving");
      if (a.vpp > 1 || b.vpp > 1) tags.insert("stack-vpp");
    }
    for (int64_t size : t.shape) {
      bool prime = size >= 11;
      for (int64_t d = 2; prime && d * d <= size; ++d) prime = size % d != 0;
      if (prime) tags.insert("prime-size");
    }
    for (const auto& [axis, dims] : t.shard) {
      if (dims.size() > 1) tags.insert("nested-split");
      for (MeshDim d : dims) {
        if (d == MeshDim::kEp || d == MeshDim::kEdp) tags.insert("expert");
      }
    }
    for (const Topology& topo : {a, b}) {
      for (int rank = 0; rank < topo.world_size(); ++rank) {
        for (const ShardedTensor& shard : ExpandTensor(t, topo, rank)) {
          if (shard.LocalNumel() == 0 && Volume(t.shape) > 0) tags.insert("empty-shard");
        }
      }
      for (const auto& [axis, dims] : t.shard) {
        const int64_t size = PaddedSize(t, axis, topo);
        if (t.split == SplitKind::kChunk && size % Parts(dims, topo) != 0) tags.insert("uneven");
      }
    }
  }
  for (const std::string& tag : Fp8Classes(s)) tags.insert(tag);
  return {tags.begin(), tags.end()};
}

void showValue(const Scenario& scenario, std::ostream& os) { os << scenario.ToJson().dump(); }

}  // namespace distckpt
