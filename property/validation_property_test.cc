// Property 3: sharding validation accepts exactly the valid layouts.
//
// An independent oracle counts, element by element, how often the main
// replicas of every key cover the global tensor: a layout is valid iff every
// element is covered exactly once and nothing lies outside. Mutations:
//  - drop a rank's shard / make a rank also save rank+1's shard as a main
//    replica (the scenario schema's `break` gap / overlap, so the case is a
//    scenario file): run through save and load as `distckpt run` does; the
//    save must fail naming exactly the broken key iff the oracle says invalid
//    (a key no rank saves any more is no sharding error: the checkpoint just
//    lacks it, and the load must say so);
//  - shift a main replica's offset by one / flip one shard's dtype (the
//    schema's `break` shift / dtype): ValidateShardingIntegrity on the
//    metadata of the broken save must reject naming exactly that key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "harness/expand/expand.h"
#include "harness/run/runner.h"
#include "mapping/py_format.h"
#include "mapping/validation.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/oracle.h"
#include "property/steps.h"

namespace distckpt {
namespace {

// Names of keys other than `key` that `message` reports.
std::string OtherKeysNamed(const Scenario& s, const std::string& key, const std::string& message) {
  std::string others;
  for (const TensorSpec& t : s.tensors) {
    if (t.key != key && message.find(PyRepr(t.key)) != std::string::npos) others += t.key + " ";
  }
  return others;
}

TEST(ValidationProperty, SaveRefusesExactlyTheGapsAndOverlaps) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.topologies = 1;
  limits.objects = false;
  CheckProperty({500,
                 {{"valid", 0.15},
                  {"invalid", 0.30},
                  {"gap", 0.2},
                  {"overlap", 0.2},
                  {"replica-dropped", 0.02},
                  {"key-in-neither", 0.005}}},
                [&] {
                  Scenario s = *GenScenario(limits);
                  const Topology topo = Topology::Parse(s.topologies[0]);
                  PairSpec pair = MakePair(s.topologies[0], s.topologies[0]);
                  if (!OneIn(4)) {
                    pair.break_save = BreakSpec{s.tensors[Choose(s.tensors.size())].key,
                                                OneIn(2) ? "gap" : "overlap",
                                                static_cast<int>(Choose(topo.world_size()))};
                    Tag({pair.break_save->kind});
                  }
                  const auto ranks = SavedShards(s, &pair, topo);
                  // A key the (unbroken) load requests that no rank saves any
                  // more; a flattened tensor of no elements is requested by
                  // nobody (load drops empty flattened ranges as save does).
                  const std::set<std::string> saved = TensorKeys(ranks);
                  const std::set<std::string> requested =
                      TensorKeys(RequestedShards(s, &pair, topo, topo));
                  std::string broken, absent;
                  for (const TensorSpec& t : s.tensors) {
                    if (!saved.count(t.key)) {
                      if (requested.count(t.key))
                        absent = t.key;
                      else
                        Tag({"key-in-neither"});
                    } else if (!MainReplicasTile(ranks, t.key)) {
                      broken = t.key;
                    }
                  }
                  if (!absent.empty()) {  // a valid save of a state without the key
                    Tag({"key-dropped"});
                    pair.expect_error = absent + " from model not in state dict";
                  } else if (pair.break_save && broken.empty()) {
                    Tag({pair.break_save->kind == "gap" ? "replica-dropped" : "empty-duplicated"});
                  }
                  Tag({broken.empty() ? "valid" : "invalid"});
                  if (!broken.empty()) {
                    pair.expect_error = fmt::format("ShardedTensor(key={}", PyRepr(broken));
                  }
                  s.pairs = {pair};
                  RunOptions options;
                  options.work_dir = work;
                  SetCase(s);
                  const PairResult r = RunScenario(s, options).at(0);
                  if (!r.ok) FailCase(s, r.reason);
                  if (broken.empty()) return;
                  if (r.reason.find("Invalid sharding pattern validation") == std::string::npos) {
                    FailCase(s, "refused, but not by sharding validation: " + r.reason);
                  }
                  const std::string others = OtherKeysNamed(s, broken, r.reason);
                  if (!others.empty()) {
                    FailCase(s, "the refusal also names valid keys " + others + ": " + r.reason);
                  }
                });
  std::filesystem::remove_all(work);
}

TEST(ValidationProperty, RejectsAShiftedOffsetOrAFlippedDtypeNamingTheKey) {
  GenLimits limits;
  limits.topologies = 1;
  limits.objects = false;
  CheckProperty({500, {{"shift", 0.2}, {"dtype-flip", 0.2}}}, [&] {
    Scenario s = *GenScenario(limits);
    const Topology topo = Topology::Parse(s.topologies[0]);
    const auto intact = SavedShards(s, nullptr, topo);
    std::vector<std::pair<int, const ShardedTensor*>> mains, all;
    auto spec_key =
        [&](const std::string& key) {  // breaks apply to the tensor specs, not the fp8 section
          return std::any_of(s.tensors.begin(), s.tensors.end(),
                             [&](const TensorSpec& t) { return t.key == key; });
        };
    for (int r = 0; r < topo.world_size(); ++r) {
      for (const ShardedTensor& t : intact[r]) {
        if (!spec_key(t.key)) continue;
        all.emplace_back(r, &t);
        if (IsMainReplica(t.replica_id) && t.LocalNumel() > 0 && !t.global_shape.empty())
          mains.emplace_back(r, &t);
      }
    }
    // The mutation, as the scenario schema's `break` (shift / dtype).
    const bool shift = OneIn(2);
    BreakSpec damage;
    if (shift) {
      RC_PRE(!mains.empty());
      const auto [rank, victim] = mains[Choose(mains.size())];
      damage = {victim->key, "shift", rank, static_cast<int>(Choose(victim->global_shape.size())),
                *rc::gen::element<int64_t>(-1, 1)};
    } else {
      RC_PRE(
          !all.empty());  // a scenario of no tensors has nothing to flip (Choose(0) divides by 0)
      const auto [rank, victim] = all[Choose(all.size())];
      // The break flips every shard of the key on that rank (a stack puts
      // several there): some other rank must hold a shard left as it was.
      RC_PRE(std::any_of(all.begin(), all.end(), [&, rank = rank](auto& t) {
        return t.second->key == victim->key && t.first != rank;
      }));
      damage = {victim->key, "dtype", rank};
      damage.dtype = victim->dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
    }
    Tag({shift ? "shift" : "dtype-flip"});
    PairSpec pair = MakePair(s.topologies[0], s.topologies[0]);
    pair.break_save = damage;
    pair.expect_error = PyRepr(damage.key);
    s.pairs = {pair};
    const std::string note =
        "property 3: ValidateShardingIntegrity on the metadata of the save with this break "
        "must reject naming exactly the key";
    SetCase(s, note);
    const auto ranks = SavedShards(s, &pair, topo);
    GlobalMetadata global(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      for (const ShardedTensor& t : ranks[r]) global[r].push_back(t);
    }
    try {
      ValidateShardingIntegrity(global);
    } catch (const CheckpointError& e) {
      const std::string message = e.what();
      if (e.kind() != ErrorKind::kInvalidSharding)
        FailCase(s, "wrong error kind: " + message, note);
      if (message.find(PyRepr(damage.key)) == std::string::npos) {
        FailCase(s, "the refusal does not name the key: " + message, note);
      }
      const std::string others = OtherKeysNamed(s, damage.key, message);
      if (!others.empty())
        FailCase(s, "the refusal also names valid keys " + others + ": " + message, note);
      return;
    }
    FailCase(s, "validation accepted it", note);
  });
}

}  // namespace
}  // namespace distckpt
