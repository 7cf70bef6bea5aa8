// Property 4: strict handling. For random requested and stored key sets and
// every mode, the missing and unexpected sets are the set differences the
// mode computes (docs/megatron-semantics.md §2.3), the request loses exactly its
// unexpected keys where the mode removes them and is untouched otherwise,
// raise_* modes throw exactly when a set they check is non-empty, naming the
// keys, and log_* modes log exactly then.
//  - SetsAreTheSetDifferences: ApplyStrictHandling on per-rank key sets
//    (ranks may request different keys).
//  - LoadReportsTheSetDifferences: a save under A and a load under B with
//    load_drop (on every rank or on some: missing keys are those no rank
//    requests) and load_extra, through `distckpt run`'s path (scenario
//    file); a rank that drops its main replica of a key others request
//    makes the load's access validation refuse it, naming the key.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "core/error.h"
#include "mapping/py_format.h"
#include "mapping/strict.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/oracle.h"
#include "property/reshard.h"
#include "property/steps.h"

namespace distckpt {
namespace {

using Keys = std::set<std::string>;

constexpr StrictHandling kModes[] = {StrictHandling::kAssumeOkUnexpected,
                                     StrictHandling::kLogUnexpected,
                                     StrictHandling::kLogAll,
                                     StrictHandling::kRaiseUnexpected,
                                     StrictHandling::kRaiseAll,
                                     StrictHandling::kReturnUnexpected,
                                     StrictHandling::kReturnAll,
                                     StrictHandling::kIgnoreAll};

Keys Minus(const Keys& a, const Keys& b) {
  Keys out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return out;
}

bool Is(StrictHandling m, std::initializer_list<StrictHandling> modes) {
  return std::find(modes.begin(), modes.end(), m) != modes.end();
}

// What each mode does with the sets (the §2.3 table, written out).
struct Expected {
  Keys missing, unexpected;  // the sets the mode checks
  bool raises = false;
  bool removes = false;  // unexpected keys leave the request
  bool logs = false;
  KeyMismatch returned;
};

Expected Oracle(StrictHandling mode, const Keys& stored, const Keys& mine, const Keys& all) {
  Expected e;
  if (mode == StrictHandling::kAssumeOkUnexpected) return e;
  e.unexpected = Minus(mine, stored);
  if (Is(mode, {StrictHandling::kLogAll, StrictHandling::kRaiseAll, StrictHandling::kReturnAll,
                StrictHandling::kIgnoreAll})) {
    e.missing = Minus(stored, all);
  }
  const bool any = !e.missing.empty() || !e.unexpected.empty();
  e.raises = any && Is(mode, {StrictHandling::kRaiseUnexpected, StrictHandling::kRaiseAll});
  e.removes = !e.raises;
  e.logs = any && Is(mode, {StrictHandling::kLogUnexpected, StrictHandling::kLogAll});
  if (Is(mode, {StrictHandling::kReturnUnexpected, StrictHandling::kReturnAll})) {
    e.returned = {e.missing, e.unexpected};
  }
  return e;
}

// A rank's request: a ShardedTensor (even keys) or ShardedObject (odd keys)
// per key, plus a plain value that strict handling must leave alone.
Node Request(const Keys& keys) {
  Dict d;
  for (const std::string& k : keys) {
    if ((k.back() - '0') % 2 == 0) {
      d[k] = Node(ShardedTensor::FromRankOffsetsMeta(k, DType::kF32, {2}, {}));
    } else {
      ShardedObject o;
      o.key = k;
      o.global_shape = {1};
      o.global_offset = {0};
      d[k] = Node(std::move(o));
    }
  }
  d["plain"] = Node(nlohmann::json(7));
  return Node(std::move(d));
}

Keys RequestKeys(const Node& request) {
  Keys keys;
  for (const auto& [k, node] : request.as<Dict>()) keys.insert(k);
  return keys;
}

TEST(StrictProperty, SetsAreTheSetDifferences) {
  CheckProperty({2000, {{"raised", 0.10}, {"missing", 0.05}, {"unexpected", 0.15}}}, [] {
    const int universe = *rc::gen::inRange(1, 8);
    auto subset = [&] {
      Keys out;
      for (int i = 0; i < universe; ++i) {
        if (OneIn(2)) out.insert("k" + std::to_string(i));
      }
      return out;
    };
    const Keys stored = subset();
    std::vector<Keys> ranks(*rc::gen::inRange(1, 5));
    Keys all;
    for (Keys& r : ranks) {
      r = subset();
      all.insert(r.begin(), r.end());
    }
    const StrictHandling mode = kModes[Choose(8)];
    RC_TAG(std::string(StrictHandlingName(mode)));
    for (const Keys& mine : ranks) {
      const Expected want = Oracle(mode, stored, mine, all);
      RC_CLASSIFY(!want.missing.empty(), "missing");
      RC_CLASSIFY(!want.unexpected.empty(), "unexpected");
      RC_CLASSIFY(want.raises, "raised");
      Node request = Request(mine);
      std::string log;
      try {
        const KeyMismatch got = ApplyStrictHandling(mode, request, stored, all, &log);
        RC_ASSERT(!want.raises);
        RC_ASSERT(got.missing == want.returned.missing);
        RC_ASSERT(got.unexpected == want.returned.unexpected);
      } catch (const CheckpointError& e) {
        RC_ASSERT(want.raises);
        RC_ASSERT(e.kind() == ErrorKind::kKeyMismatch);
        const std::string message = e.what();
        RC_ASSERT((message.find("Missing keys") != std::string::npos) == !want.missing.empty());
        RC_ASSERT((message.find("Unexpected keys") != std::string::npos) ==
                  !want.unexpected.empty());
        for (const std::string& k : want.missing)
          RC_ASSERT(message.find(PyRepr(k)) != std::string::npos);
        for (const std::string& k : want.unexpected)
          RC_ASSERT(message.find(PyRepr(k)) != std::string::npos);
      }
      Keys left = mine;
      left.insert("plain");
      if (want.removes) left = Minus(left, want.unexpected);
      RC_ASSERT(RequestKeys(request) == left);
      RC_ASSERT(request.at("plain").as<nlohmann::json>() == nlohmann::json(7));
      RC_ASSERT(log.empty() == !want.logs);
    }
  });
}

std::string Joined(const Keys& keys) { return fmt::format("{}", fmt::join(keys, ",")); }

TEST(StrictProperty, LoadReportsTheSetDifferences) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.objects = false;  // objects reshard only on identical grids: keep the key sets exact
  CheckProperty(
      {300,
       {{"raised", 0.05},
        {"missing", 0.10},
        {"unexpected", 0.10},
        {"key-in-neither", 0.003},
        {"dropped-on-some-ranks", 0.10},
        {"access-invalid", 0.05},
        {"dropped-on-some-ranks-valid", 0.02}}},
      [&] {
        Scenario s = *GenReshardScenario(limits);
        PairSpec& pair = s.pairs[0];
        const StrictHandling mode = kModes[Choose(8)];
        pair.strict = mode;
        // A key is dropped on every rank, on some ranks only (missing only if
        // no rank requests it: Megatron's missing keys are global), or kept.
        const int world = Topology::Parse(pair.load).world_size();
        for (const TensorSpec& t : s.tensors) {
          if (OneIn(3)) {
            pair.load_drop.push_back(t.key);
          } else if (OneIn(3)) {
            std::vector<int>& ranks = pair.load_drop_ranks[t.key];
            for (int r = 0; r < world; ++r) {
              if (OneIn(2)) ranks.push_back(r);
            }
          }
        }
        const int extra = *rc::gen::inRange(0, 3);
        for (int i = 0; i < extra; ++i) {
          TensorSpec x;
          x.key = "x" + std::to_string(i);
          x.shape = {*rc::gen::inRange<int64_t>(1, 5)};
          pair.load_extra.push_back(x);
        }
        // The key sets as save and load see them: a flattened tensor of no
        // elements is in neither (both drop empty flattened ranges).
        const Topology a = Topology::Parse(pair.save), b = Topology::Parse(pair.load);
        const RankShards request = RequestedShards(s, &pair, a, b);
        const Keys stored = TensorKeys(SavedShards(s, &pair, a));
        const Keys requested = TensorKeys(request);
        const Keys on_rank0 = TensorKeys(request, 0);  // the report's unexpected keys are rank 0's
        // Load validates the requested access pattern (after strict handling):
        // the main replicas the ranks request must tile every requested key, so
        // a rank dropping its main replica of a key that others request is refused.
        std::string untiled;
        for (const std::string& key : requested) {
          if (untiled.empty() && !MainReplicasTile(request, key)) untiled = key;
        }
        RC_CLASSIFY(std::any_of(s.tensors.begin(), s.tensors.end(),
                                [&](const TensorSpec& t) { return !stored.count(t.key); }),
                    "key-in-neither");
        bool partial = false;  // a key some ranks drop that another requests
        for (const auto& [key, ranks] : pair.load_drop_ranks) {
          partial = partial || (!ranks.empty() && requested.count(key) &&
                                static_cast<int>(ranks.size()) < world);
        }
        RC_CLASSIFY(partial, "dropped-on-some-ranks");
        const Expected want = Oracle(mode, stored, on_rank0, requested);
        RC_TAG(std::string(StrictHandlingName(mode)));
        RC_CLASSIFY(!want.missing.empty(), "missing");
        RC_CLASSIFY(!want.unexpected.empty(), "unexpected");
        RC_CLASSIFY(want.raises, "raised");
        RC_CLASSIFY(!untiled.empty(), "access-invalid");
        RC_CLASSIFY(partial && untiled.empty(), "dropped-on-some-ranks-valid");
        if (want.raises) {
          pair.expect_error = want.missing.empty() ? "Unexpected keys" : "Missing keys";
        } else if (!untiled.empty()) {
          pair.expect_error = fmt::format("ShardedTensor(key={}",
                                          PyRepr(untiled));  // access or flattened-range message
        } else if (mode == StrictHandling::kAssumeOkUnexpected && extra > 0) {
          pair.expect_error =
              "from model not in state dict";  // the reader fails on the unknown key
        }
        if (Is(mode, {StrictHandling::kReturnUnexpected, StrictHandling::kReturnAll})) {
          pair.expect_missing = Joined(want.returned.missing);
          pair.expect_unexpected = Joined(want.returned.unexpected);
        }
        SetCase(s);
        ExpectNoFailure(RunReshard(s, work), s);
      });
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace distckpt
