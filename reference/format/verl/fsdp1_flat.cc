#include "format/verl/fsdp1_flat.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <ranges>
#include <regex>

#include "core/error.h"

namespace distckpt {
namespace {

// A candidate nested unit: the keys [first, last] under one prefix.
struct Subtree {
  std::string prefix;
  size_t first = 0, last = 0;
  int64_t numel = 0;
};

// Every module prefix with its contiguous run of keys (a subtree is contiguous
// in module order; a prefix whose keys are not contiguous is no module), in
// key order.
std::vector<Subtree> Subtrees(const std::vector<std::string>& keys,
                              const std::vector<int64_t>& numels) {
  std::map<std::string, Subtree> by_prefix;
  std::vector<std::string> order;
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t dot = keys[i].find('.'); dot != std::string::npos;
         dot = keys[i].find('.', dot + 1)) {
      const std::string prefix = keys[i].substr(0, dot + 1);
      auto [it, fresh] = by_prefix.try_emplace(prefix);
      if (fresh) {
        it->second = {prefix, i, i, 0};
        order.push_back(prefix);
      } else if (it->second.last + 1 != i) {
        it->second.first = keys.size();  // not contiguous: never a unit
      }
      it->second.last = i;
      it->second.numel += numels[i];
    }
  }
  std::vector<Subtree> trees;
  for (const std::string& p : order) {
    if (by_prefix[p].first < keys.size()) trees.push_back(by_prefix[p]);
  }
  std::stable_sort(trees.begin(), trees.end(),
                   [](const Subtree& a, const Subtree& b) { return a.first < b.first; });
  return trees;
}

struct Search {
  const std::vector<Subtree>* trees;
  const std::vector<int64_t>* shards;  // the nested units' shard sizes
  int64_t world;
  int64_t all;         // every parameter's numel
  int64_t root_shard;  // -1: no root unit
  std::vector<size_t> chosen;
  std::vector<std::vector<size_t>> found;
  int64_t budget = 200000;

  void Run(size_t unit, size_t next_key, int64_t used) {
    if (found.size() > 1 || --budget < 0) return;
    if (unit == shards->size()) {
      const int64_t rest = all - used;
      const bool ok =
          root_shard < 0 ? rest == 0 : rest > 0 && Fsdp1ShardSize(rest, world) == root_shard;
      if (ok) found.push_back(chosen);
      return;
    }
    for (size_t t = 0; t < trees->size(); ++t) {
      const Subtree& s = (*trees)[t];
      if (s.first < next_key || Fsdp1ShardSize(s.numel, world) != (*shards)[unit]) continue;
      chosen.push_back(t);
      Run(unit + 1, s.last + 1, used + s.numel);
      chosen.pop_back();
      if (found.size() > 1 || budget < 0) return;
    }
  }
};

}  // namespace

int64_t Fsdp1ShardSize(int64_t total, int64_t world) { return (total + world - 1) / world; }

namespace {

// Each key's (unit, start): two groupings that place every parameter alike
// are the same layout.
std::vector<std::pair<size_t, int64_t>> Layout(const std::vector<Fsdp1Unit>& units,
                                               const std::vector<int64_t>& numels) {
  std::vector<std::pair<size_t, int64_t>> out(numels.size());
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t at = 0;
    for (size_t p : units[u].params) {
      if (units[u].align > 0 && at % units[u].align) at += units[u].align - at % units[u].align;
      out[p] = {u, at};
      at += numels[p];
    }
  }
  return out;
}

// use_orig_params=True: the rank's piece sizes under a candidate grouping.
struct OrigSearch {
  const std::vector<Subtree>* trees;
  const std::vector<int64_t>* numels;
  const std::map<int64_t, std::vector<int64_t>>* pieces;  // rank -> piece per key
  int64_t world, align;
  std::vector<size_t> chosen;
  std::vector<std::vector<Fsdp1Unit>> found;
  int64_t budget = 200000;

  bool Fits(Fsdp1Unit& unit) const {
    SetFsdp1Align(unit, *numels, align);
    for (const auto& [rank, want] : *pieces) {
      std::vector<int64_t> got(unit.params.size(), 0);
      for (const Fsdp1Piece& p : Fsdp1RankPieces(unit, *numels, world, rank)) {
        got[std::find(unit.params.begin(), unit.params.end(), p.param) - unit.params.begin()] =
            p.in_param.size();
      }
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != want[unit.params[i]]) return false;
      }
    }
    return true;
  }

  void Finish() {
    std::vector<bool> nested(numels->size(), false);
    std::vector<Fsdp1Unit> units(1);
    for (size_t t : chosen) {
      Fsdp1Unit u{(*trees)[t].prefix, {}, 0, 0};
      for (size_t i = (*trees)[t].first; i <= (*trees)[t].last; ++i) {
        nested[i] = true;
        u.params.push_back(i);
      }
      SetFsdp1Align(u, *numels, align);
      units.push_back(std::move(u));
    }
    for (size_t i = 0; i < nested.size(); ++i) {
      if (!nested[i]) units[0].params.push_back(i);
    }
    if (units[0].params.empty()) {
      units.erase(units.begin());
    } else if (!Fits(units[0])) {
      return;
    }
    for (const auto& f : found) {
      if (Layout(f, *numels) == Layout(units, *numels)) return;
    }
    found.push_back(std::move(units));
  }

  void Run(size_t next_key) {
    if (found.size() > 1 || --budget < 0) return;
    Finish();
    for (size_t t = 0; t < trees->size() && found.size() < 2 && budget >= 0; ++t) {
      const Subtree& s = (*trees)[t];
      if (s.first < next_key) continue;
      Fsdp1Unit u{s.prefix, {}, 0, 0};
      for (size_t i = s.first; i <= s.last; ++i) u.params.push_back(i);
      if (!Fits(u)) continue;
      chosen.push_back(t);
      Run(s.last + 1);
      chosen.pop_back();
    }
  }
};

}  // namespace

std::vector<Fsdp1Unit> InferFsdp1OrigUnits(const std::vector<std::string>& keys,
                                           const std::vector<int64_t>& numels,
                                           const std::map<int64_t, std::vector<int64_t>>& pieces,
                                           int64_t world, const std::string& what,
                                           bool* ambiguous) {
  bool bad = keys.size() != numels.size() || world < 1 || pieces.empty();
  for (const auto& [rank, p] : pieces)
    bad = bad || p.size() != keys.size() || rank < 0 || rank >= world;
  if (bad) {
    Fail(ErrorKind::kInvalidArgument, "{}: FSDP1 units of {} keys, {} ranks of {}", what,
         keys.size(), pieces.size(), world);
  }
  if (ambiguous) *ambiguous = false;
  static constexpr int64_t kAligns[] = {4, 8, 2, 16};  // 16 bytes of fp32, bf16, fp64, fp8
  auto distinct = [&](const std::vector<std::vector<Fsdp1Unit>>& fits) {
    std::vector<std::vector<Fsdp1Unit>> out;
    for (const auto& f : fits) {
      bool seen = false;
      for (const auto& o : out) seen = seen || Layout(o, numels) == Layout(f, numels);
      if (!seen) out.push_back(f);
    }
    return out;
  };
  const std::vector<Subtree> trees = Subtrees(keys, numels);
  std::vector<std::vector<Fsdp1Unit>> defaults, searched;
  for (int64_t align : kAligns) {
    OrigSearch s{&trees, &numels, &pieces, world, align, {}, {}};
    std::vector<Fsdp1Unit> units = DefaultFsdp1Units(keys, numels);
    bool fits = true;
    for (Fsdp1Unit& u : units) fits = s.Fits(u) && fits;
    if (fits) defaults.push_back(std::move(units));
    if (defaults.empty()) {
      s.Run(0);
      if (s.budget < 0) {
        Fail(ErrorKind::kUnsupported, "{}: too many ways to group {} parameters into FSDP units",
             what, keys.size());
      }
      for (auto& f : s.found) searched.push_back(std::move(f));
    }
  }
  std::vector<std::vector<Fsdp1Unit>> found = distinct(defaults.empty() ? searched : defaults);
  if (found.empty()) {
    Fail(ErrorKind::kUnsupported,
         "{}: the optimizer's per-parameter 1-D pieces (FSDP1, use_orig_params=True) fit no "
         "grouping of the model file's {} parameters into aligned FSDP units over {} ranks "
         "(ranks {})",
         what, keys.size(), world, fmt::join(std::views::keys(pieces), ", "));
  }
  if (found.size() > 1 && ambiguous) {
    *ambiguous = true;
    return {};
  }
  if (found.size() > 1) {
    Fail(ErrorKind::kUnsupported,
         "{}: the optimizer's per-parameter 1-D pieces (FSDP1, use_orig_params=True) fit more "
         "than one layout of FSDP units (alignment {} or {}; ambiguous, not guessed)",
         what, found[0][0].align, found[1][0].align);
  }
  return found[0];
}

std::vector<Fsdp1Unit> InferFsdp1Units(const std::vector<std::string>& keys,
                                       const std::vector<int64_t>& numels,
                                       const std::vector<int64_t>& shard_sizes, int64_t world,
                                       const std::string& what) {
  if (keys.size() != numels.size() || world < 1 || shard_sizes.empty()) {
    Fail(ErrorKind::kInvalidArgument, "{}: FSDP1 units of {} keys, world {}", what, keys.size(),
         world);
  }
  int64_t all = 0;
  for (int64_t n : numels) all += n;
  const std::vector<Subtree> trees = Subtrees(keys, numels);
  std::vector<std::vector<size_t>> found;
  bool with_root = false;
  for (int root = 1; root >= 0 && found.size() < 2; --root) {  // with a root unit first
    if (root == 0 && !found.empty()) break;
    std::vector<int64_t> nested(shard_sizes.begin() + root, shard_sizes.end());
    Search s{&trees, &nested, world, all, root ? shard_sizes[0] : -1, {}, {}};
    s.Run(0, 0, 0);
    if (s.budget < 0) {
      Fail(ErrorKind::kUnsupported, "{}: too many ways to group {} parameters into {} FSDP units",
           what, keys.size(), shard_sizes.size());
    }
    for (auto& f : s.found) found.push_back(f);
    if (!found.empty()) with_root = root == 1;
  }
  if (found.empty()) {
    Fail(ErrorKind::kUnsupported,
         "{}: {} flat optimizer shards (FSDP1, use_orig_params=False) fit no grouping of the model "
         "file's {} parameters into FSDP units over {} ranks",
         what, shard_sizes.size(), keys.size(), world);
  }
  if (found.size() > 1) {
    Fail(ErrorKind::kUnsupported,
         "{}: the {} flat optimizer shards fit more than one grouping of the parameters into FSDP "
         "units (ambiguous; not guessed)",
         what, shard_sizes.size());
  }
  std::vector<Fsdp1Unit> units;
  std::vector<int> unit_of(keys.size(), 0);
  if (with_root) units.push_back({"", {}, 0});
  for (size_t t : found[0]) {
    units.push_back({trees[t].prefix, {}, 0});
    for (size_t i = trees[t].first; i <= trees[t].last; ++i) {
      unit_of[i] = static_cast<int>(units.size()) - 1;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    units[unit_of[i]].params.push_back(i);
    units[unit_of[i]].total += numels[i];
  }
  return units;
}

std::vector<Fsdp1Unit> DefaultFsdp1Units(const std::vector<std::string>& keys,
                                         const std::vector<int64_t>& numels) {
  static const std::regex layer(R"(^(.*\blayers\.[0-9]+\.).*)");
  std::vector<Fsdp1Unit> units(1);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::smatch m;
    size_t u = 0;
    if (std::regex_match(keys[i], m, layer)) {
      auto [it, fresh] = index.try_emplace(m[1].str(), units.size());
      if (fresh) units.push_back({m[1].str(), {}, 0});
      u = it->second;
    }
    units[u].params.push_back(i);
    units[u].total += numels[i];
  }
  if (units[0].params.empty()) units.erase(units.begin());
  return units;
}

void SetFsdp1Align(Fsdp1Unit& unit, const std::vector<int64_t>& numels, int64_t align) {
  unit.align = align;
  int64_t at = 0;
  for (size_t p : unit.params) {
    if (align > 0 && at % align) at += align - at % align;  // _init_flat_param_and_metadata
    at += numels[p];
  }
  unit.total = at;
}

std::vector<Fsdp1Piece> Fsdp1RankPieces(const Fsdp1Unit& unit, const std::vector<int64_t>& numels,
                                        int64_t world, int64_t rank) {
  const int64_t shard = Fsdp1ShardSize(unit.total, world);
  const int64_t lo = rank * shard, hi = lo + shard;
  std::vector<Fsdp1Piece> out;
  int64_t at = 0;
  for (size_t p : unit.params) {
    if (unit.align > 0 && at % unit.align) at += unit.align - at % unit.align;
    const int64_t a = std::max(at, lo), b = std::min(at + numels[p], hi);
    if (a < b) out.push_back({p, {a - at, b - at}, {a - lo, b - lo}});
    at += numels[p];
  }
  return out;
}

}  // namespace distckpt
