// Tests of the state-dict tree: dict access, paths, message text and the
// factory build.
#include "mapping/state_dict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mapping/testing.h"

namespace distckpt {
namespace {

using nlohmann::json;

TEST(NodeTest, IndexInsertsIntoDicts) {
  Node root;
  root["a"]["b"] = Node(json(3));
  EXPECT_EQ(root.at("a").at("b").as<json>(), json(3));
  Node empty_list{List{}};
  empty_list["x"] = Node(json("v"));  // an empty node becomes a dict
  EXPECT_TRUE(empty_list.is<Dict>());
  Node number{json(1)};
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [&] { number["x"]; }),
            "Cannot index a <class 'int'> with key 'x': not a dict");
}

TEST(NodeTest, AtNamesTheMissingKey) {
  Node root;
  root["present"] = Node(json(1));
  EXPECT_EQ(ErrorMessage(ErrorKind::kKeyMismatch, [&] { root.at("absent"); }),
            "Key 'absent' not found in state dict");
  EXPECT_EQ(ErrorMessage(ErrorKind::kKeyMismatch, [&] { root.at("present").at("x"); }),
            "Cannot look up key 'x' in a <class 'int'>: not a dict");
}

TEST(NodeTest, PathToString) {
  EXPECT_EQ(PathToString({"decoder", "layers", "0", "weight"}), "decoder.layers.0.weight");
  EXPECT_EQ(PathToString({}), "");
}

TEST(NodeTest, NodeToStringAndTypeRepr) {
  Node root;
  root["list"] = Node(List{Node(json(1)), Node(json("s"))});
  root["obj"] = Node(ShardedObject{"O", {}, {1}, {0}});
  root["t"] = Node(Arange({2, 3}));
  EXPECT_EQ(
      NodeToString(root),
      "{'list': [1, \"s\"], 'obj': ShardedObject(key='O'), 't': Tensor(dtype=i64, shape=(2, 3))}");
  EXPECT_EQ(NodeTypeRepr(root), "<class 'dict'>");
  EXPECT_EQ(NodeTypeRepr(root.at("list")), "<class 'list'>");
  EXPECT_EQ(NodeTypeRepr(Node(json(1.5))), "<class 'float'>");
  EXPECT_EQ(NodeTypeRepr(Node(json(nullptr))), "<class 'NoneType'>");
  EXPECT_EQ(NodeTypeRepr(root.at("t")), "<class 'torch.Tensor'>");
}

TEST(ShardedTensorFactoryTest, BuildPassesItsFields) {
  ShardedTensorFactory f;
  f.key = "fkey";
  f.data = Arange({3});
  f.replica_id = {0, 1};
  f.flattened_range = FlatRange{1, 2};
  f.build_fn = [](const std::string& key, const Tensor& data, const ReplicaId& replica_id,
                  const std::optional<FlatRange>& range) {
    Node out;
    out["key"] = Node(json(key));
    out["numel"] = Node(json(data.numel()));
    out["replica"] = Node(json(replica_id));
    out["start"] = Node(json(range->start));
    return out;
  };
  const Node built = f.Build();
  EXPECT_EQ(built.at("key").as<json>(), json("fkey"));
  EXPECT_EQ(built.at("numel").as<json>(), json(3));
  EXPECT_EQ(built.at("replica").as<json>(), json({0, 1}));
  EXPECT_EQ(built.at("start").as<json>(), json(1));
  f.build_fn = nullptr;
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidArgument, [&] { f.Build(); }),
            "ShardedTensorFactory 'fkey' has no build_fn");
}

}  // namespace
}  // namespace distckpt
