// Tests of the tree utilities: Megatron's extract/merge/diff semantics and
// messages, factories (test_mapping #32) and save/load pre-processing.
#include "mapping/dict_utils.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "mapping/testing.h"

namespace distckpt {
namespace {

using nlohmann::json;
using testing::ElementsAre;

Node J(json j) { return Node(std::move(j)); }

ShardedTensor St(const std::string& key, Tensor data = Arange({2})) {
  return ShardedTensor::FromRankOffsets(key, std::move(data), {});
}

bool IsSt(const Node& n) { return n.is<ShardedTensor>(); }

ShardedTensorFactory Factory(std::string key, Tensor data, ShardedTensorFactory::BuildFn build,
                             ShardedTensorFactory::MergeFn merge) {
  ShardedTensorFactory f;
  f.key = std::move(key);
  f.data = std::move(data);
  f.build_fn = std::move(build);
  f.merge_fn = std::move(merge);
  return f;
}

std::string Keys(const Node& n) {  // compact structure: sharded leaves by key
  if (const Dict* d = n.get_if<Dict>()) {
    std::vector<std::string> items;
    for (const auto& [k, v] : *d) items.push_back(k + ":" + Keys(v));
    return fmt::format("{{{}}}", fmt::join(items, ","));
  }
  if (const List* l = n.get_if<List>()) {
    std::vector<std::string> items;
    for (const Node& v : *l) items.push_back(Keys(v));
    return fmt::format("[{}]", fmt::join(items, ","));
  }
  if (const ShardedTensor* t = n.get_if<ShardedTensor>()) return "ST(" + t->key + ")";
  if (const ShardedObject* o = n.get_if<ShardedObject>()) return "SO(" + o->key + ")";
  if (const ShardedTensorFactory* f = n.get_if<ShardedTensorFactory>()) {
    return "F(" + f->key + (f->data.defined() ? ",data" : "") + ")";
  }
  if (n.is<LocalNonpersistentObject>()) return "NP";
  if (n.is<Tensor>()) return "T";
  return n.as<json>().dump();
}

Node Example() {
  Node x;
  x["a"] = J(1);
  x["b"]["c"] = Node(St("c"));
  x["b"]["d"] = J(2);
  x["e"] = Node(Dict{});
  Node g;
  g["g"] = Node(St("g"));
  x["f"] = Node(List{Node(St("f0")), J(3), Node(List{}), g});
  return x;
}

TEST(ExtractMatchingTest, KeepsHierarchyAndEmptyContainers) {
  const auto [matching, nonmatching] = ExtractMatching(Example(), IsSt);
  EXPECT_EQ(Keys(matching), "{b:{c:ST(c)},f:[ST(f0),{g:ST(g)}]}");
  EXPECT_EQ(Keys(nonmatching), "{a:1,b:{d:2},e:{},f:[3,[]]}");
}

TEST(ExtractMatchingTest, ListsAsDicts) {
  const auto [matching, nonmatching] = ExtractMatching(Example(), IsSt, true);
  EXPECT_EQ(Keys(matching), "{b:{c:ST(c)},f:{0:ST(f0),3:{g:ST(g)}}}");
  EXPECT_EQ(Keys(nonmatching), "{a:1,b:{d:2},e:{},f:{1:3,2:[]}}");
}

TEST(ExtractMatchingTest, RejectsLeafTopLevel) {
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [] { ExtractMatching(J(1), IsSt); }),
            "Unexpected top-level object type: <class 'int'>");
}

TEST(MergeTest, MergesRecursively) {
  Node x1, x2;
  x1["a"]["b"] = J(1);
  x1["l"] = Node(List{Node(Dict{{"x", J(1)}})});
  x2["a"]["c"] = J(2);
  x2["l"] = Node(List{Node(Dict{{"y", J(2)}})});
  x2["n"] = J(3);
  Merge(x1, x2);
  EXPECT_EQ(Keys(x1), "{a:{b:1,c:2},l:[{x:1,y:2}],n:3}");
}

TEST(MergeTest, MovingMergesAsCopying) {
  Node base, x2;
  base["a"]["b"] = J(1);
  base["l"] = Node(List{Node(Dict{{"x", J(1)}})});
  x2["a"]["c"] = Node(Arange({3}));
  x2["l"] = Node(List{Node(Dict{{"y", J(2)}})});
  x2["n"] = J(3);
  Node copied = base, moved = base;
  Merge(copied, x2);
  Node source = x2;
  Merge(moved, std::move(source));
  EXPECT_EQ(Keys(moved), "{a:{b:1,c:T},l:[{x:1,y:2}],n:3}");
  EXPECT_TRUE(Diff(moved, copied).empty());
  Node bad;
  bad["l"] = Node(List{J(1), J(2)});
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [&] { Merge(moved, std::move(bad)); }),
            "Cannot merge two lists with different lengths (1 and 2, encountered at level ('l',))");
}

// Into an empty dict (a load's result merged into a checkpoint without
// common state): every entry, at any depth, copied or moved; a moved
// tensor keeps its storage, and the source is left empty.
TEST(MergeTest, IntoAnEmptyDictTakesEveryEntry) {
  Node x2;
  x2["a"]["c"] = Node(Arange({3}));
  x2["l"] = Node(List{Node(Dict{{"y", J(2)}})});
  x2["n"] = J(3);
  const std::byte* storage = x2["a"]["c"].as<Tensor>().data();
  Node copied = Node(Dict{}), moved = Node(Dict{});
  Merge(copied, x2);
  EXPECT_EQ(Keys(copied), "{a:{c:T},l:[{y:2}],n:3}");
  EXPECT_TRUE(Diff(copied, x2).empty());
  Node source = x2;
  Merge(moved, std::move(source));
  EXPECT_EQ(Keys(moved), "{a:{c:T},l:[{y:2}],n:3}");
  EXPECT_EQ(moved["a"]["c"].as<Tensor>().data(), storage);
  EXPECT_TRUE(source.as<Dict>().empty());
  // A later merge into the now non-empty dict still merges recursively.
  Node more;
  more["a"]["d"] = J(4);
  Merge(moved, std::move(more));
  EXPECT_EQ(Keys(moved), "{a:{c:T,d:4},l:[{y:2}],n:3}");
}

TEST(MergeTest, MegatronMessages) {
  Node x1, x2;
  x1["l"] = Node(List{J(1)});
  x2["l"] = Node(List{J(1), J(2)});
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [&] { Merge(x1, x2); }),
            "Cannot merge two lists with different lengths (1 and 2, encountered at level ('l',))");
  x2["l"] = Node(List{J(2)});
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [&] { Merge(x1, x2); }),
            "Duplicate non-dict and non-list values encountered: `1` and `2` (at level ('l', 0))");
}

TEST(DiffTest, ComparesTensorsByBytesAndShardedLeavesByData) {
  Node x1, x2;
  x1["t"] = Node(Arange({3}));
  x2["t"] = Node(Arange({3}));  // equal bytes, separate storage
  x1["t_dtype"] = Node(Arange({3}, 0, DType::kI64));
  x2["t_dtype"] = Node(Arange({3}, 0, DType::kF64));
  x1["st"] = Node(St("k1", Arange({2})));
  x2["st"] = Node(St("k2", Arange({2})));  // compared by data only
  x1["st_diff"] = Node(St("k", Arange({2})));
  x2["st_diff"] = Node(St("k", Arange({2}, 1)));
  x1["obj"] = Node(ShardedObject{"o", json(1), {1}, {0}});
  x2["obj"] = Node(ShardedObject{"o", json(2), {1}, {0}});
  x1["j"] = J(1);
  x2["j"] = J(1);
  x1["l"] = Node(List{J(1), J(2), J(3)});
  x2["l"] = Node(List{J(1), J(5)});
  x1["only1"] = J(0);
  x2["only2"] = J(0);
  x1["kind"] = J(1);
  x2["kind"] = Node(Dict{});
  const TreeDiff d = Diff(x1, x2);
  EXPECT_FALSE(d.empty());
  EXPECT_THAT(d.only_left, ElementsAre(NodePath{"only1"}, NodePath{"l", "2"}));
  EXPECT_THAT(d.only_right, ElementsAre(NodePath{"only2"}));
  EXPECT_THAT(d.mismatch, ElementsAre(NodePath{"kind"}, NodePath{"l", "1"}, NodePath{"obj"},
                                      NodePath{"st_diff"}, NodePath{"t_dtype"}));
  EXPECT_TRUE(Diff(x1, x1).empty());
}

TEST(ForEachLeafTest, VisitsLeavesWithPaths) {
  std::vector<std::string> seen;
  ForEachLeaf(static_cast<const Node&>(Example()), [&](const NodePath& path, const Node& leaf) {
    seen.push_back(PathToString(path) + "=" + Keys(leaf));
  });
  EXPECT_THAT(seen, ElementsAre("a=1", "b.c=ST(c)", "b.d=2", "f.0=ST(f0)", "f.1=3", "f.3.g=ST(g)"));
}

// test_mapping.py::TestShardedTensorFactory::test_build_and_merge (#32).
TEST(FactoryTest, BuildAndMerge) {
  auto build_fn = [](const std::string& key, const Tensor& data, const ReplicaId& replica_id,
                     const std::optional<FlatRange>& range) {
    EXPECT_FALSE(range.has_value());
    Node out;
    out["level2_a"] = Node(
        ShardedTensor::FromRankOffsets(key + "part1", Arange(data.shape(), 1), {}, replica_id));
    out["level2_b"] = Node(
        ShardedTensor::FromRankOffsets(key + "part2", Arange(data.shape(), 2), {}, replica_id));
    return out;
  };
  auto get_state_dict = [&] {
    Node sd;
    sd["level1"] = Node(Factory("a", Arange({3}), build_fn,
                                [](const Node& x) { return x.at("level2_b").as<Tensor>(); }));
    return sd;
  };
  Node sd = get_state_dict();
  ApplyFactories(sd);
  EXPECT_THAT(Values(sd.at("level1").at("level2_a").as<ShardedTensor>().data),
              ElementsAre(1, 2, 3));
  EXPECT_THAT(Values(sd.at("level1").at("level2_b").as<ShardedTensor>().data),
              ElementsAre(2, 3, 4));
  EXPECT_EQ(sd.at("level1").at("level2_a").as<ShardedTensor>().key, "apart1");

  // Simulate loading.
  for (const char* k : {"level2_a", "level2_b"}) {
    Node& leaf = sd["level1"][k];
    Tensor data = leaf.as<ShardedTensor>().data;
    leaf = Node(data);
  }
  ApplyFactoryMerges(sd, get_state_dict());
  EXPECT_THAT(Values(sd.at("level1").as<Tensor>()), ElementsAre(2, 3, 4));
}

TEST(FactoryTest, MergesIntoListsThroughIndexDicts) {
  Node loaded;
  loaded["l"] = Node(List{J(0), Node(Dict{{"p", Node(Arange({2}, 5))}}), J(2)});
  Node factories;
  factories["l"]["1"] =
      Node(Factory("f", {}, nullptr, [](const Node& x) { return x.at("p").as<Tensor>(); }));
  ApplyFactoryMerges(loaded, factories);
  EXPECT_THAT(Values(loaded.at("l").as<List>()[1].as<Tensor>()), ElementsAre(5, 6));
}

TEST(FactoryTest, MergeMessages) {
  const Node factory{Factory("f", {}, nullptr, [](const Node&) { return Tensor(); })};
  Node loaded, factories;
  loaded["a"] = J(1);
  factories["b"] = factory;
  EXPECT_EQ(
      ErrorMessage(ErrorKind::kInvalidArgument, [&] { ApplyFactoryMerges(loaded, factories); }),
      "Different dict keys encountered in `apply_factory_merges` (dict_keys(['a']) vs "
      "dict_keys(['b']))");

  loaded = Node();
  loaded["l"] = Node(List{J(1)});
  factories = Node();
  factories["l"] = Node(List{factory, factory});
  EXPECT_EQ(
      ErrorMessage(ErrorKind::kInvalidArgument, [&] { ApplyFactoryMerges(loaded, factories); }),
      "Cannot merge two lists with different lengths (1 and 2, encountered at key ('l',))");

  factories = Node();
  factories["l"]["x"] = factory;
  EXPECT_EQ(
      ErrorMessage(ErrorKind::kInvalidArgument, [&] { ApplyFactoryMerges(loaded, factories); }),
      "Invalid dict key x non-integer type encountered in a list-dict merge at level ('l',)");

  factories = Node();
  factories["l"]["5"] = factory;
  EXPECT_EQ(
      ErrorMessage(ErrorKind::kInvalidArgument, [&] { ApplyFactoryMerges(loaded, factories); }),
      "Dict key 5 out of bound for list of length1 (encountered at level ('l',))");

  factories = Node();
  factories["l"] = Node(List{J(2)});
  EXPECT_EQ(
      ErrorMessage(ErrorKind::kInvalidArgument, [&] { ApplyFactoryMerges(loaded, factories); }),
      "Duplicate non-dict and non-list values encountered: `1` and `2 (at key ('l', 0))`");
}

ShardedTensorFactory SplitFactory(const std::string& key) {
  return Factory(
      key, Arange({4}),
      [](const std::string& k, const Tensor& data, const ReplicaId&,
         const std::optional<FlatRange>&) {
        Node out;
        out["p1"] = Node(St(k + ".p1", data.Slice({{0}, {2}})));
        out["p2"] = Node(St(k + ".p2", data.Slice({{2}, {2}})));
        return out;
      },
      [](const Node& x) { return x.at("p1").as<Tensor>(); });
}

ShardedTensor EmptyFlat() {
  return ShardedTensor::FromRankOffsetsFlat("ef", Arange({0}), {6}, {}, FlatRange{3, 3});
}

// Every kind of leaf the pre-processing sorts, at the top level.
Node MixedStateDict() {
  Node sd;
  sd["w"] = Node(St("w"));
  sd["f"] = Node(SplitFactory("f"));
  sd["np"] = Node(LocalNonpersistentObject{json(7)});
  sd["lr"] = J(0.5);
  sd["empty_flat"] = Node(EmptyFlat());
  return sd;
}

TEST(PreprocessTest, SaveSplitsShardedFromCommon) {
  Node sd = MixedStateDict();
  sd["obj"] = Node(ShardedObject{"obj", json(1), {1}, {0}});
  sd["nested"]["x"] = J(1);
  sd["nested"]["np2"] = Node(LocalNonpersistentObject{json(8)});
  sd["lst"] = Node(List{Node(St("l0")), J(5)});
  const SavePieces pieces = SavePreprocess(sd);
  EXPECT_EQ(Keys(pieces.sharded), "{f:{p1:ST(f.p1),p2:ST(f.p2)},lst:[ST(l0)],obj:SO(obj),w:ST(w)}");
  EXPECT_EQ(Keys(pieces.common), "{lr:0.5,lst:[5],nested:{x:1}}");
  EXPECT_TRUE(sd.at("f").is<ShardedTensorFactory>());  // the caller's tree is untouched
}

TEST(PreprocessTest, LoadExtractsFactoriesAndNonpersistent) {
  Node sd = MixedStateDict();
  sd["lst"] = Node(List{Node(St("l0")), Node(SplitFactory("g")), J(3)});
  const LoadPieces pieces = LoadPreprocess(sd);
  EXPECT_EQ(Keys(pieces.sharded()),
            "{f:{p1:ST(f.p1),p2:ST(f.p2)},lst:[ST(l0),{p1:ST(g.p1),p2:ST(g.p2)}],w:ST(w)}");
  EXPECT_EQ(Keys(pieces.factories), "{f:F(f),lst:{1:F(g)}}");  // data dropped
  EXPECT_EQ(Keys(pieces.nonpersistent), "{np:7}");
  EXPECT_EQ(Keys(sd.at("f")), "F(f,data)");
}

// Random trees for the one-split shortcut: dicts and lists nested up to three
// deep with every kind of leaf, empty containers anywhere; `special` (if not
// kNone) is the one kind of leaf that makes the passes necessary.
// kShardedOnly: no leaf but sharded ones and no empty container (a model's
// sharded state dict), which a load reads in place.
enum class Special { kNone, kShardedOnly, kFactory, kNonpersistent, kEmptyFlat };

struct TreeGen {
  std::mt19937 rng;
  Special special;
  int next_key = 0;
  // What the trees held (the distribution the test checks).
  bool empty_in_dict = false, empty_in_list = false, only_empties = false, mixed_list = false;

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  Node Leaf() {
    const std::string key = "k" + std::to_string(next_key++);
    if (special == Special::kShardedOnly) {
      if (Pick(2) == 0) return Node(St(key));
      return Node(ShardedObject{key, json(1), {1}, {0}});
    }
    switch (Pick(special == Special::kNone ? 6 : 8)) {
      case 0:
        return Node(St(key));
      case 1:
        return Node(ShardedTensor::FromRankOffsetsFlat(key, Arange({2}), {6}, {}, FlatRange{1, 3}));
      case 2:
        return Node(ShardedObject{key, json(1), {1}, {0}});
      case 3:
        return J(Pick(100));
      case 4:
        return Node(Dict{});
      case 5:
        return Node(List{});
      default:
        switch (special) {
          case Special::kFactory:
            return Node(SplitFactory(key));
          case Special::kNonpersistent:
            return Node(LocalNonpersistentObject{json(key)});
          default: {
            ShardedTensor t = EmptyFlat();
            t.key = key;
            return Node(std::move(t));
          }
        }
    }
  }
  Node Tree(int depth) {
    if (depth == 0 || Pick(3) == 0) return Leaf();
    const int n = special == Special::kShardedOnly ? 1 + Pick(4) : Pick(5);
    auto empty = [](const Node& v) { return v.is_container() && !Truthy(v); };
    if (Pick(2) == 0) {
      Dict d;
      bool all_empty = n > 0;
      for (int i = 0; i < n; ++i) {
        Node v = Tree(depth - 1);
        empty_in_dict = empty_in_dict || empty(v);
        all_empty = all_empty && empty(v);
        d["d" + std::to_string(i)] = std::move(v);
      }
      only_empties = only_empties || all_empty;
      return Node(std::move(d));
    }
    List l;
    bool sharded = false, other = false;
    for (int i = 0; i < n; ++i) {
      l.push_back(Tree(depth - 1));
      empty_in_list = empty_in_list || empty(l.back());
      (l.back().is<ShardedTensor>() ? sharded : other) = true;
    }
    mixed_list = mixed_list || (sharded && other);
    return Node(std::move(l));
  }
  static bool Truthy(const Node& n) {
    if (const Dict* d = n.get_if<Dict>()) return !d->empty();
    if (const List* l = n.get_if<List>()) return !l->empty();
    return true;
  }
};

// Save/LoadPreprocess split a tree without factories, nonpersistent objects
// and empty flat ranges once; the pieces must be the passes' pieces exactly
// (empty containers kept or dropped as the passes do, lists compacted), and
// a tree with any of those leaves must still give the passes' pieces.
TEST(PreprocessTest, OneSplitGivesThePassesPieces) {
  int shortcut_cases = 0, top_lists = 0, in_place = 0, save_in_place = 0;
  for (Special special : {Special::kNone, Special::kShardedOnly, Special::kFactory,
                          Special::kNonpersistent, Special::kEmptyFlat}) {
    TreeGen gen{std::mt19937(static_cast<unsigned>(special) + 7), special};
    for (int i = 0; i < 400; ++i) {
      Node top = gen.Pick(4) == 0 ? Node(List{}) : Node(Dict{});
      const int n = 1 + gen.Pick(5);
      for (int j = 0; j < n; ++j) {
        Node v = gen.Tree(3);
        if (Dict* d = top.get_if<Dict>())
          (*d)["t" + std::to_string(j)] = std::move(v);
        else
          top.as<List>().push_back(std::move(v));
      }
      if (special == Special::kNone) {
        ++shortcut_cases;
        top_lists += top.is<List>();
      }
      SCOPED_TRACE(Keys(top));
      const SavePieces save = SavePreprocess(top), save_passes = SavePreprocessInPasses(top);
      EXPECT_EQ(Keys(save.sharded), Keys(save_passes.sharded));
      EXPECT_EQ(Keys(save.common), Keys(save_passes.common));
      const LoadPieces load = LoadPreprocess(top), load_passes = LoadPreprocessInPasses(top);
      EXPECT_EQ(Keys(load.sharded()), Keys(load_passes.sharded()));
      EXPECT_EQ(Keys(load.nonpersistent), Keys(load_passes.nonpersistent));
      EXPECT_EQ(Keys(load.factories), Keys(load_passes.factories));
      // A request of sharded leaves only is read in place (the comparison
      // above fails one read in place that the passes would change).
      const bool read_in_place = &load.sharded() == &top;
      if (special == Special::kShardedOnly) {
        EXPECT_TRUE(read_in_place);
      }
      in_place += read_in_place;
      // What lets a save borrow such a tree (PrepareSave): it is its own
      // sharded piece, and its common piece is an empty container.
      EXPECT_EQ(IsShardedOnly(top), read_in_place);
      if (IsShardedOnly(top)) {
        EXPECT_TRUE(Diff(save.sharded, top).empty());
        EXPECT_TRUE(save.common.is<List>() ? save.common.as<List>().empty()
                                           : save.common.as<Dict>().empty());
        EXPECT_EQ(save.common.is<List>(), top.is<List>());
        ++save_in_place;
      }
      if (read_in_place) {
        LoadPieces copy = LoadPreprocess(top);
        Node& own = copy.mutable_sharded();  // copied out of the request
        EXPECT_NE(&own, &top);
        EXPECT_EQ(Keys(own), Keys(top));
      }
    }
    if (special == Special::kNone) {
      // Every case where a pass could differ from the one split occurs.
      EXPECT_TRUE(gen.empty_in_dict && gen.empty_in_list && gen.only_empties && gen.mixed_list);
    }
  }
  EXPECT_GE(top_lists, 50);
  EXPECT_EQ(shortcut_cases, 400);
  EXPECT_GE(in_place, 400);
  EXPECT_GE(save_in_place, 400);
  // A leaf at the top fails either way, with the passes' message.
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [] { SavePreprocess(J(1)); }),
            "Unexpected top-level object type: <class 'int'>");
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [] { LoadPreprocess(J(1)); }),
            "Unexpected top-level object type: <class 'int'>");
}

}  // namespace
}  // namespace distckpt
