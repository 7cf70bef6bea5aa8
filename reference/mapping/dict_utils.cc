// Tree utilities (docs/megatron-semantics.md §1.4, §1.6) and save/load
// pre-processing (§1.8).
#include "mapping/dict_utils.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "mapping/py_format.h"

namespace distckpt {

namespace {

// Python truthiness of an extracted part: empty containers are false.
bool Truthy(const Node& node) {
  if (const Dict* d = node.get_if<Dict>()) return !d->empty();
  if (const List* l = node.get_if<List>()) return !l->empty();
  return true;
}

// A recursion's key as Megatron prints it: a tuple of dict keys ('a') and
// list indices (0).
using KeyTuple = std::vector<std::string>;
KeyTuple Append(const KeyTuple& key, std::string element) {
  KeyTuple out = key;
  out.push_back(std::move(element));
  return out;
}

std::string DictKeys(const Dict& d) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : d) keys.push_back(PyRepr(k));
  return fmt::format("dict_keys({})", PyList(keys));
}

bool TensorsEqual(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.Equals(b);
}

// Leaf equality for Diff: tensors by bytes, sharded leaves by their data.
bool LeavesEqual(const Node& a, const Node& b) {
  if (a.value().index() != b.value().index()) return false;
  if (const Tensor* t = a.get_if<Tensor>()) return TensorsEqual(*t, b.as<Tensor>());
  if (const ShardedTensor* t = a.get_if<ShardedTensor>()) {
    return TensorsEqual(t->data, b.as<ShardedTensor>().data);
  }
  if (const ShardedObject* o = a.get_if<ShardedObject>())
    return o->data == b.as<ShardedObject>().data;
  if (const ShardedTensorFactory* f = a.get_if<ShardedTensorFactory>()) {
    return TensorsEqual(f->data, b.as<ShardedTensorFactory>().data);
  }
  if (const LocalNonpersistentObject* n = a.get_if<LocalNonpersistentObject>()) {
    return n->obj == b.as<LocalNonpersistentObject>().obj;
  }
  return a.as<nlohmann::json>() == b.as<nlohmann::json>();
}

// Splits `x` into the leaves matching `pred` and the rest. The leaves are
// copied, or moved out of `x` when it is an rvalue (Save/LoadPreprocess's
// own intermediate trees: a leaf is copied once per preprocessing, not once
// per pass).
template <typename Src>
std::pair<Node, Node> Extract(Src&& x, const std::function<bool(const Node&)>& pred,
                              bool lists_as_dicts) {
  constexpr bool kMove = !std::is_lvalue_reference_v<Src>;
  auto take = [](auto& v) -> decltype(auto) {
    if constexpr (kMove) {
      return std::move(v);
    } else {
      return static_cast<const Node&>(v);
    }
  };
  if (auto* d = x.template get_if<Dict>()) {
    Dict matching, nonmatching;
    for (auto& [k, v] : *d) {
      if (v.is_container()) {
        const bool truthy = Truthy(v);
        auto [match, nonmatch] = Extract(take(v), pred, lists_as_dicts);
        if (Truthy(match)) matching[k] = std::move(match);
        if (Truthy(nonmatch) || !truthy) nonmatching[k] = std::move(nonmatch);
      } else if (pred(v)) {
        matching[k] = take(v);
      } else {
        nonmatching[k] = take(v);
      }
    }
    return {Node(std::move(matching)), Node(std::move(nonmatching))};
  }
  if (auto* l = x.template get_if<List>()) {
    Node matching = lists_as_dicts ? Node(Dict{}) : Node(List{});
    Node nonmatching = lists_as_dicts ? Node(Dict{}) : Node(List{});
    auto set_elem = [lists_as_dicts](Node& target, size_t index, Node value) {
      if (lists_as_dicts) {
        target.as<Dict>()[std::to_string(index)] = std::move(value);
      } else {
        target.as<List>().push_back(std::move(value));
      }
    };
    for (size_t i = 0; i < l->size(); ++i) {
      auto& v = (*l)[i];
      if (v.is_container() && Truthy(v)) {
        auto [match, nonmatch] = Extract(take(v), pred, lists_as_dicts);
        if (Truthy(match)) set_elem(matching, i, std::move(match));
        if (Truthy(nonmatch)) set_elem(nonmatching, i, std::move(nonmatch));
      } else {
        const bool matches = pred(v);
        set_elem(matches ? matching : nonmatching, i, take(v));
      }
    }
    return {std::move(matching), std::move(nonmatching)};
  }
  Fail(ErrorKind::kInvalidArgument, "Unexpected top-level object type: {}", NodeTypeRepr(x));
}

// X2: const Node& (x2 copied into x1) or Node (an rvalue: moved from).
template <typename X2>
void MergeAt(Node& x1, X2&& x2, const KeyTuple& key) {
  constexpr bool kMove = !std::is_const_v<std::remove_reference_t<X2>>;
  auto pass = [](auto& value) -> decltype(auto) {
    if constexpr (kMove) {
      return std::move(value);
    } else {
      return static_cast<const Node&>(value);
    }
  };
  if (x1.is<Dict>() && x2.template is<Dict>()) {
    Dict& d1 = x1.as<Dict>();
    auto& d2 = x2.template as<Dict>();
    if (d1.empty()) {  // every entry of d2 is new (a load's result into its empty common state)
      if constexpr (kMove) {
        d1.swap(d2);
      } else {
        d1 = d2;
      }
      return;
    }
    for (auto it2 = d2.begin(); it2 != d2.end();) {
      auto it = d1.find(it2->first);
      if (it != d1.end()) {
        MergeAt(it->second, pass(it2->second), Append(key, PyRepr(it2->first)));
        ++it2;
      } else if constexpr (kMove) {
        d1.insert(d2.extract(it2++));  // the entry itself moves: no key or node copied
      } else {
        d1.emplace(it2->first, it2->second);
        ++it2;
      }
    }
  } else if (x1.is<List>() && x2.template is<List>()) {
    List& l1 = x1.as<List>();
    auto& l2 = x2.template as<List>();
    if (l1.size() != l2.size()) {
      Fail(ErrorKind::kInvalidArgument,
           "Cannot merge two lists with different lengths ({} and {}, encountered at level {})",
           l1.size(), l2.size(), PyTuple(key));
    }
    for (size_t i = 0; i < l2.size(); ++i) {
      MergeAt(l1[i], pass(l2[i]), Append(key, std::to_string(i)));
    }
  } else {
    Fail(ErrorKind::kInvalidArgument,
         "Duplicate non-dict and non-list values encountered: `{}` and `{}` (at level {})",
         NodeToString(x1), NodeToString(x2), PyTuple(key));
  }
}

void DiffAt(const Node& x1, const Node& x2, const NodePath& prefix, TreeDiff& out) {
  if (x1.is<Dict>() && x2.is<Dict>()) {
    const Dict& d1 = x1.as<Dict>();
    const Dict& d2 = x2.as<Dict>();
    for (const auto& [k, v] : d1) {
      if (!d2.count(k)) out.only_left.push_back(Append(prefix, k));
    }
    for (const auto& [k, v] : d2) {
      if (!d1.count(k)) out.only_right.push_back(Append(prefix, k));
    }
    for (const auto& [k, v1] : d1) {
      auto it = d2.find(k);
      if (it != d2.end()) DiffAt(v1, it->second, Append(prefix, k), out);
    }
  } else if (x1.is<List>() && x2.is<List>()) {
    // Megatron reports bare, unprefixed indices here (and the same ones on
    // both sides); we report the extra elements' paths on the side that has them.
    const List& l1 = x1.as<List>();
    const List& l2 = x2.as<List>();
    for (size_t i = l2.size(); i < l1.size(); ++i)
      out.only_left.push_back(Append(prefix, std::to_string(i)));
    for (size_t i = l1.size(); i < l2.size(); ++i)
      out.only_right.push_back(Append(prefix, std::to_string(i)));
    for (size_t i = 0; i < std::min(l1.size(), l2.size()); ++i) {
      DiffAt(l1[i], l2[i], Append(prefix, std::to_string(i)), out);
    }
  } else if (!LeavesEqual(x1, x2)) {
    out.mismatch.push_back(prefix);
  }
}

template <typename NodeT, typename Fn>
void VisitLeaves(NodeT& x, NodePath& path, const Fn& fn) {
  if (auto* d = x.template get_if<Dict>()) {
    for (auto& [k, v] : *d) {
      path.push_back(k);
      VisitLeaves(v, path, fn);
      path.pop_back();
    }
  } else if (auto* l = x.template get_if<List>()) {
    for (size_t i = 0; i < l->size(); ++i) {
      path.push_back(std::to_string(i));
      VisitLeaves((*l)[i], path, fn);
      path.pop_back();
    }
  } else {
    fn(static_cast<const NodePath&>(path), x);
  }
}

void FactoryMergesAt(Node& x1, const Node& x2, const KeyTuple& key) {
  if (const ShardedTensorFactory* f = x2.get_if<ShardedTensorFactory>()) {
    if (!f->merge_fn) {
      Fail(ErrorKind::kInvalidArgument, "ShardedTensorFactory {} has no merge_fn", PyRepr(f->key));
    }
    Tensor merged = f->merge_fn(x1);
    x1 = Node(std::move(merged));
  } else if (x1.is<Dict>() && x2.is<Dict>()) {
    Dict& d1 = x1.as<Dict>();
    for (const auto& [k, v2] : x2.as<Dict>()) {
      auto it = d1.find(k);
      if (it == d1.end()) {
        Fail(ErrorKind::kInvalidArgument,
             "Different dict keys encountered in `apply_factory_merges` ({} vs {})", DictKeys(d1),
             DictKeys(x2.as<Dict>()));
      }
      FactoryMergesAt(it->second, v2, Append(key, PyRepr(k)));
    }
  } else if (x1.is<List>() && x2.is<List>()) {
    List& l1 = x1.as<List>();
    const List& l2 = x2.as<List>();
    if (l1.size() != l2.size()) {
      Fail(ErrorKind::kInvalidArgument,
           "Cannot merge two lists with different lengths ({} and {}, encountered at key {})",
           l1.size(), l2.size(), PyTuple(key));
    }
    for (size_t i = 0; i < l2.size(); ++i)
      FactoryMergesAt(l1[i], l2[i], Append(key, std::to_string(i)));
  } else if (x1.is<List>() && x2.is<Dict>()) {
    // A list turned into {index: value} by ExtractMatching(return_lists_as_dicts).
    List& l1 = x1.as<List>();
    for (const auto& [k, v2] : x2.as<Dict>()) {
      size_t index = 0;
      const auto [ptr, ec] = std::from_chars(k.data(), k.data() + k.size(), index);
      if (ec != std::errc() || ptr != k.data() + k.size() || k.empty()) {
        Fail(ErrorKind::kInvalidArgument,
             "Invalid dict key {} non-integer type encountered in a list-dict merge at level {}", k,
             PyTuple(key));
      }
      if (index >= l1.size()) {
        // Megatron's text, missing space included.
        Fail(ErrorKind::kInvalidArgument,
             "Dict key {} out of bound for list of length{} (encountered at level {})", k,
             l1.size(), PyTuple(key));
      }
      FactoryMergesAt(l1[index], v2, Append(key, k));
    }
  } else {
    Fail(ErrorKind::kInvalidArgument,
         "Duplicate non-dict and non-list values encountered: `{}` and `{} (at key {})`",
         NodeToString(x1), NodeToString(x2), PyTuple(key));
  }
}

bool IsShardedBase(const Node& n) { return n.is<ShardedTensor>() || n.is<ShardedObject>(); }

bool IsEmptyFlattened(const Node& n) {
  const ShardedTensor* t = n.get_if<ShardedTensor>();
  return t != nullptr && t->flattened_range && t->flattened_range->size() == 0;
}

}  // namespace

std::pair<Node, Node> ExtractMatching(const Node& x, const std::function<bool(const Node&)>& pred,
                                      bool return_lists_as_dicts) {
  return Extract(x, pred, return_lists_as_dicts);
}

void Merge(Node& x1, const Node& x2) { MergeAt(x1, x2, {}); }

void Merge(Node& x1, Node&& x2) { MergeAt(x1, std::move(x2), {}); }

TreeDiff Diff(const Node& x1, const Node& x2) {
  TreeDiff out;
  DiffAt(x1, x2, {}, out);
  return out;
}

void ForEachLeaf(Node& x, const std::function<void(const NodePath&, Node&)>& fn) {
  NodePath path;
  VisitLeaves(x, path, fn);
}

void ForEachLeaf(const Node& x, const std::function<void(const NodePath&, const Node&)>& fn) {
  NodePath path;
  VisitLeaves(x, path, fn);
}

void ApplyFactories(Node& x) {
  ForEachLeaf(x, [](const NodePath&, Node& leaf) {
    if (const ShardedTensorFactory* f = leaf.get_if<ShardedTensorFactory>()) {
      Node built = f->Build();
      leaf = std::move(built);
    }
  });
}

void ApplyFactoryMerges(Node& loaded, const Node& factories) {
  FactoryMergesAt(loaded, factories, {});
}

namespace {

bool HasFactory(const Node& tree) {
  bool any = false;
  ForEachLeaf(tree, [&](const NodePath&, const Node& leaf) {
    any = any || leaf.is<ShardedTensorFactory>();
  });
  return any;
}

// Whether a tree holds a leaf that a pre-processing pass acts on besides
// the split of sharded from common: a factory, a nonpersistent object or an
// empty flattened range. Without one, every other pass keeps its input as it
// is (a pass keeps a container exactly when it keeps something inside it, or
// keeps it empty as it found it), so one split of the caller's tree gives the
// pieces the passes give: one copy of each leaf and of the tree's maps, not
// three (a quarter of a 256-tensor load's fixed cost).
// (A plain recursion: this runs on every save and load, and ForEachLeaf
// builds every leaf's path.)
bool OnlySplitNeeded(const Node& tree) {
  if (const Dict* d = tree.get_if<Dict>()) {
    return std::all_of(d->begin(), d->end(),
                       [](const auto& kv) { return OnlySplitNeeded(kv.second); });
  }
  if (const List* l = tree.get_if<List>())
    return std::all_of(l->begin(), l->end(), OnlySplitNeeded);
  return !tree.is<ShardedTensorFactory>() && !tree.is<LocalNonpersistentObject>() &&
         !IsEmptyFlattened(tree);
}

}  // namespace

SavePieces SavePreprocess(const Node& state_dict) {
  if (state_dict.is_container() && OnlySplitNeeded(state_dict)) {
    auto [sharded, common] = Extract(state_dict, IsShardedBase, false);
    return SavePieces{std::move(sharded), std::move(common)};
  }
  return SavePreprocessInPasses(state_dict);
}

SavePieces SavePreprocessInPasses(const Node& state_dict) {
  // The first pass copies the caller's leaves (after building its factories
  // in a copy of the tree, when it holds any); the later passes move them.
  auto nonpersistent = [](const Node& n) { return n.is<LocalNonpersistentObject>(); };
  Node persistent;
  if (HasFactory(state_dict)) {
    Node sd = state_dict;
    ApplyFactories(sd);
    persistent = Extract(std::move(sd), nonpersistent, false).second;
  } else {
    persistent = Extract(state_dict, nonpersistent, false).second;
  }
  auto [sharded, common] = Extract(std::move(persistent), IsShardedBase, false);
  Node kept = Extract(
                  std::move(sharded), [](const Node& n) { return !IsEmptyFlattened(n); }, false)
                  .first;
  return SavePieces{std::move(kept), std::move(common)};
}

Node& LoadPieces::mutable_sharded() {
  if (request_) {
    sharded_ = *request_;
    request_ = nullptr;
  }
  return sharded_;
}

LoadPieces LoadPieces::OfShardedRequest(const Node& request) {
  LoadPieces pieces(Node(), request.is<List>() ? Node(List{}) : Node(Dict{}), Node(Dict{}));
  pieces.request_ = &request;
  return pieces;
}

namespace {

// Whether every leaf below a container is sharded (no empty flat range) and
// no container below it is empty: then the passes keep the tree as it is.
bool OnlyShardedBelow(const Node& tree) {
  auto kept = [](const Node& v) {
    if (v.is_container()) return Truthy(v) && OnlyShardedBelow(v);
    return IsShardedBase(v) && !IsEmptyFlattened(v);
  };
  if (const Dict* d = tree.get_if<Dict>()) {
    return std::all_of(d->begin(), d->end(), [&](const auto& kv) { return kept(kv.second); });
  }
  const List& l = tree.as<List>();
  return std::all_of(l.begin(), l.end(), kept);
}

}  // namespace

bool IsShardedOnly(const Node& tree) { return tree.is_container() && OnlyShardedBelow(tree); }

LoadPieces LoadPreprocess(const Node& state_dict) {
  if (IsShardedOnly(state_dict)) {
    return LoadPieces::OfShardedRequest(state_dict);
  }
  if (state_dict.is_container() && OnlySplitNeeded(state_dict)) {
    auto [sharded, unused] = Extract(state_dict, IsShardedBase, false);
    // What the passes leave of an empty match: a container of the top's kind.
    Node none = state_dict.is<List>() ? Node(List{}) : Node(Dict{});
    return LoadPieces{std::move(sharded), std::move(none), Node(Dict{})};
  }
  return LoadPreprocessInPasses(state_dict);
}

LoadPieces LoadPreprocessInPasses(const Node& state_dict) {
  // One pass makes the structural copy and drops empty flattened tensors.
  Node sd = ExtractMatching(state_dict, [](const Node& n) { return !IsEmptyFlattened(n); }).first;
  // Most requests hold no factory: then no pass copies every leaf to find none.
  Node factories = HasFactory(sd)
                       ? Extract(
                             sd, [](const Node& n) { return n.is<ShardedTensorFactory>(); }, true)
                             .first
                       : Node(Dict{});
  ApplyFactories(sd);
  ForEachLeaf(factories, [](const NodePath&, Node& leaf) {
    if (ShardedTensorFactory* f = leaf.get_if<ShardedTensorFactory>()) f->data = Tensor();
  });
  auto [nonpersistent, rest] = Extract(
      std::move(sd), [](const Node& n) { return n.is<LocalNonpersistentObject>(); }, false);
  ForEachLeaf(nonpersistent, [](const NodePath&, Node& leaf) {
    if (LocalNonpersistentObject* n = leaf.get_if<LocalNonpersistentObject>()) {
      nlohmann::json obj = std::move(n->obj);
      leaf = Node(std::move(obj));
    }
  });
  // Megatron's load() keeps only the sharded part of the request: common
  // values come from the checkpoint.
  Node sharded = Extract(std::move(rest), IsShardedBase, false).first;
  return LoadPieces{std::move(sharded), std::move(nonpersistent), std::move(factories)};
}

}  // namespace distckpt
