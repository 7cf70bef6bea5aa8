#include "engine/common_state.h"

#include <gtest/gtest.h>

#include "io/testing.h"
#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

TEST(CommonStateTest, RoundTripsNestedDicts) {
  Dict inner;
  inner["lr"] = Node(nlohmann::json(0.5));
  inner["betas"] = Node(nlohmann::json::array({0.9, 0.95}));
  Dict root;
  root["optimizer"] = Node(std::move(inner));
  root["iteration"] = Node(nlohmann::json(123));
  Node original(std::move(root));
  nlohmann::json j = CommonToJson(original);
  EXPECT_EQ(j["optimizer"]["lr"], 0.5);
  EXPECT_EQ(j["iteration"], 123);
  EXPECT_TRUE(Diff(original, CommonFromJson(j)).empty());
}

TEST(CommonStateTest, ListsBecomeArrays) {
  List l{Node(nlohmann::json(1)), Node(nlohmann::json("a"))};
  Dict root;
  root["l"] = Node(std::move(l));
  nlohmann::json j = CommonToJson(Node(std::move(root)));
  EXPECT_EQ(j["l"], nlohmann::json::array({1, "a"}));
}

// Megatron's optimizer common state: param_groups is a list of dicts whose
// `params` are nonpersistent; it comes back as a List of Dicts, so the
// request's params merge into it element by element.
TEST(CommonStateTest, ListsOfDictsComeBackAsListsAndMergeWithNonpersistentParams) {
  nlohmann::json saved = {{"param_groups", {{{"lr", 0.1}}, {{"lr", 0.2}}}}, {"betas", {0.9, 0.95}}};
  Node loaded = CommonFromJson(saved);
  ASSERT_TRUE(loaded.at("param_groups").is<List>());
  EXPECT_TRUE(loaded.at("betas").is<nlohmann::json>());  // plain values stay one leaf
  Dict g0, g1;
  g0["params"] = Node(nlohmann::json::array({0, 2}));
  g1["params"] = Node(nlohmann::json::array({1}));
  Dict request;
  request["param_groups"] = Node(List{Node(std::move(g0)), Node(std::move(g1))});
  Merge(loaded, Node(std::move(request)));
  EXPECT_EQ(CommonToJson(loaded)["param_groups"],
            nlohmann::json({{{"lr", 0.1}, {"params", {0, 2}}}, {{"lr", 0.2}, {"params", {1}}}}));
}

TEST(CommonStateTest, TensorsAreRefusedWithTheirPath) {
  Dict inner;
  inner["t"] = Node(Tensor::Zeros(DType::kF32, {2}));
  Dict root;
  root["model"] = Node(std::move(inner));
  Node n(std::move(root));
  EXPECT_THAT([&] { CommonToJson(n); }, ThrowsError(ErrorKind::kUnsupported, "model.t"));
}

}  // namespace
}  // namespace distckpt
