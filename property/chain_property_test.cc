// Property 2: for random topologies A, B, C, loading A's checkpoint under B
// and saving the loaded state (tensors and common state) again under B gives
// a checkpoint `distckpt diff`-identical to A's (DiffCheckpoints: tensors,
// objects, common state), and loading that under C
// gives, element for element, what loading A's checkpoint under C gives.
//
// The counterexample file holds the pairs A->B with `"resave": {"load": C}`
// (the resave, its diff against A's checkpoint and its load under C) and
// A->C, so `distckpt run` replays every step but the byte comparison of the
// two loads under C (each is checked against the generated values).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/checkpoint_diff.h"
#include "engine/load.h"
#include "engine/save.h"
#include "harness/expand/expand.h"
#include "harness/expand/resave.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/steps.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// The loaded "tensors" dict; load drops requests with an empty flattened
// range (docs/megatron-semantics.md §1.8), and with them an emptied dict.
Dict LoadedTensors(const LoadResult& r) {
  const Dict& root = r.state_dict.as<Dict>();
  auto it = root.find("tensors");
  return it == root.end() ? Dict{} : it->second.as<Dict>();
}

// Loads `dir` (saved under `saved`) under `topo`; per rank, the loaded
// tensors dict and the check of every element against the generator.
struct Loaded {
  std::vector<Dict> tensors;
  std::optional<std::string> failure;
};

Loaded LoadUnder(const Scenario& s, const Topology& saved, const Topology& topo,
                 const std::string& dir) {
  Loaded out;
  out.tensors.resize(topo.world_size());
  std::vector<std::optional<std::string>> bad(topo.world_size());
  out.failure = OnThreads(topo.world_size(), [&](Communicator& comm) {
    LoadResult r = Load(BuildLoadRequest(s, nullptr, saved, topo, comm.rank()), dir, comm);
    bad[comm.rank()] = CheckLoaded(s, nullptr, saved, topo, comm.rank(), r);
    out.tensors[comm.rank()] = LoadedTensors(r);
  });
  for (int rank = 0; rank < topo.world_size() && !out.failure; ++rank) {
    if (bad[rank]) out.failure = fmt::format("rank {}: {}", rank, *bad[rank]);
  }
  return out;
}

// Loads A's checkpoint under B and saves the loaded state under B (what a
// pair's "resave" does: harness/expand/resave.h).
std::optional<std::string> Resave(const Scenario& s, const Topology& a, const Topology& b,
                                  const std::string& from, const std::string& to) {
  return OnThreads(b.world_size(), [&](Communicator& comm) {
    const Node request = BuildLoadRequest(s, nullptr, a, b, comm.rank());
    LoadResult r = Load(request, from, comm);
    SaveOptions options;
    options.topology = b.ToString();
    Save(ResaveState(request, r.state_dict), to, comm, options);
  });
}

bool SameBytes(const Dict& x, const Dict& y) {
  if (x.size() != y.size()) return false;
  for (const auto& [path, node] : x) {
    auto it = y.find(path);
    if (it == y.end()) return false;
    const Tensor& p = node.as<Tensor>();
    const Tensor& q = it->second.as<Tensor>();
    if (p.dtype() != q.dtype() || p.shape() != q.shape() ||
        std::memcmp(p.data(), q.data(), p.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> RunChain(const Scenario& s, const std::string& work) {
  const Topology a = Topology::Parse(s.topologies[0]);
  const Topology b = Topology::Parse(s.topologies[1]);
  const Topology c = Topology::Parse(s.topologies[2]);
  const std::string dir_a = (fs::path(work) / "a").string();
  const std::string dir_b = (fs::path(work) / "b").string();
  struct Cleanup {
    std::string a, b;
    ~Cleanup() {
      fs::remove_all(a);
      fs::remove_all(b);
    }
  } cleanup{dir_a, dir_b};
  if (auto e = SaveScenario(s, a.ToString(), dir_a)) return *e;
  if (auto e = Resave(s, a, b, dir_a, dir_b)) return "load under B and resave: " + *e;
  const CheckpointDiff diff = DiffCheckpoints(dir_a, dir_b);  // `distckpt diff A B`
  if (!diff.identical()) {
    return fmt::format(
        "the checkpoint resaved under B differs from A's: only in A: [{}]; only in B: [{}]; {}",
        fmt::join(diff.only_a, ", "), fmt::join(diff.only_b, ", "),
        fmt::join(diff.mismatches, "; "));
  }
  // Megatron drops empty flattened ranges, so a flattened tensor of no
  // elements leaves no trace in either checkpoint (finding 6).
  const size_t stored = TensorKeys(SavedShards(s, nullptr, a)).size();
  if (diff.tensors_compared != stored) {
    return fmt::format("distckpt diff compared {} tensors of {}", diff.tensors_compared, stored);
  }
  Loaded direct = LoadUnder(s, a, c, dir_a);
  if (direct.failure) return "A -> C: " + *direct.failure;
  Loaded chained = LoadUnder(s, b, c, dir_b);
  if (chained.failure) return "A -> B -> C: " + *chained.failure;
  for (int rank = 0; rank < c.world_size(); ++rank) {
    if (!SameBytes(direct.tensors[rank], chained.tensors[rank])) {
      return fmt::format("rank {} of C loads different tensors via B than directly", rank);
    }
  }
  return std::nullopt;
}

TEST(ChainProperty, ReshardingThroughBEqualsDirectAndResavesIdentically) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.topologies = 3;
  limits.objects = false;     // objects cannot be resharded, so B cannot resave them
  limits.padding = false;     // B's padding differs from A's by design
  limits.load_dtype = false;  // B's resave would store the converted dtype
  CheckProperty(
      {300,
       {{"uneven", 0.05}, {"flattened", 0.10}, {"odd-size", 0.20}, {"world-size-changing", 0.30}}},
      [&] {
        Scenario s = *GenScenario(limits);
        PairSpec through_b = MakePair(s.topologies[0], s.topologies[1]);
        through_b.resave = true;
        through_b.resave_load = s.topologies[2];
        s.pairs = {through_b, MakePair(s.topologies[0], s.topologies[2])};
        Tag(ReshardClasses(s));
        CheckScenario(s, limits, [&](const Scenario& c) { return RunChain(c, work); });
      });
  fs::remove_all(work);
}

}  // namespace
}  // namespace distckpt
