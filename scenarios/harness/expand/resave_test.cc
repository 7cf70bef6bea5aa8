#include "harness/expand/resave.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/run/runner.h"
#include "harness/spec/spec.h"

namespace distckpt {
namespace {

using ::testing::HasSubstr;

Tensor Filled(std::initializer_list<float> values) {
  Tensor t = Tensor::Empty(DType::kF32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data_as<float>());
  return t;
}

TEST(ResaveStateTest, ShardedLeavesTakeTheLoadedDataAndTheCommonStateStays) {
  Dict tensors, objects;
  tensors["w"] = Node(ShardedTensor::FromRankOffsetsMeta("w", DType::kF32, {2}, {{0, 1, 2}}));
  tensors["gone"] = Node(ShardedTensor::FromRankOffsetsMeta("gone", DType::kF32, {3}, {}));
  ShardedTensor empty = ShardedTensor::FromRankOffsetsMeta("flat", DType::kF32, {3}, {});
  empty.flattened_range = FlatRange{2, 2};
  tensors["flat"] = Node(empty);
  ShardedObject rng;
  rng.key = "rng";
  rng.global_shape = {1};
  rng.global_offset = {0};
  objects["rng"] = Node(rng);
  Dict request_root;
  request_root["tensors"] = Node(tensors);
  request_root["objects"] = Node(objects);
  request_root["extra"] = Node(Dict{});
  Dict unstored;  // requested, absent from the checkpoint, skipped by the load
  unstored["te"] = Node(ShardedObject{"layer._extra_state", {}, {1}, {0}});
  request_root["unstored"] = Node(unstored);
  request_root["local"] = Node(LocalNonpersistentObject{nlohmann::json(5)});
  Dict loaded_tensors, loaded_objects, loaded_root;
  loaded_tensors["w"] =
      Node(Filled({1.5f, -2.0f}));  // "gone" was removed by a strict mode, "flat" dropped
  loaded_objects["rng"] = Node(nlohmann::json{{"state", 7}});
  loaded_root["tensors"] = Node(loaded_tensors);
  loaded_root["objects"] = Node(loaded_objects);
  loaded_root["common"] = Node(nlohmann::json{{"step", 3}});
  loaded_root["local"] = Node(nlohmann::json(5));

  const Node out = ResaveState(Node(request_root), Node(loaded_root));
  const ShardedTensor& w = out.at("tensors").at("w").as<ShardedTensor>();
  EXPECT_EQ(w.key, "w");
  EXPECT_EQ(w.global_offset, (Shape{2}));
  EXPECT_TRUE(w.data.Equals(Filled({1.5f, -2.0f})));
  EXPECT_FALSE(out.at("tensors").as<Dict>().count("gone"));
  const ShardedTensor& flat = out.at("tensors").at("flat").as<ShardedTensor>();
  EXPECT_EQ(flat.flattened_range, (FlatRange{2, 2}));
  EXPECT_EQ(flat.data.numel(), 0);
  EXPECT_EQ(out.at("objects").at("rng").as<ShardedObject>().data, (nlohmann::json{{"state", 7}}));
  EXPECT_EQ(out.at("common").as<nlohmann::json>(), (nlohmann::json{{"step", 3}}));
  EXPECT_TRUE(out.at("local").is<LocalNonpersistentObject>());
  EXPECT_TRUE(out.at("extra").is<Dict>());
  EXPECT_FALSE(out.as<Dict>().count("unstored"));  // not an empty dict in the common state
}

// A pair's "resave": identical when the loaded state is the saved one, a
// diff naming the key when the request converted the dtype, and the load of
// the resaved checkpoint under another topology checked element by element.
TEST(ResavePairTest, DiffsTheResavedCheckpointAndLoadsItUnderResaveLoad) {
  Scenario s = Scenario::FromJson(nlohmann::json::parse(R"({"tensors": [
      {"key": "w", "shape": [6, 4], "shard": {"0": "tp"}},
      {"key": "f", "shape": [10], "flatten": "dp"},
      {"key": "h", "shape": [5], "dtype": "f32", "load_dtype": "bf16"}],
    "pairs": [{"save": "tp=2,dp=2", "load": "dp=3", "resave": {"load": "tp=3"}}]})"),
                                  "t.json");
  std::vector<PairResult> r = RunScenario(s, RunOptions{});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_THAT(r[0].reason,
              HasSubstr("the checkpoint saved again under dp=3 differs from the first"));
  EXPECT_THAT(r[0].reason, HasSubstr("h: dtype f32 vs bf16"));
  s.tensors.pop_back();
  r = RunScenario(s, RunOptions{});
  EXPECT_TRUE(r.at(0).ok) << r.at(0).reason;
  s.pairs[0].resave_load = "tp=5";  // 6 rows cannot be split into 5
  r = RunScenario(s, RunOptions{});
  EXPECT_FALSE(r.at(0).ok);
  EXPECT_THAT(r.at(0).reason, HasSubstr("the checkpoint saved again, loaded under tp=5:"));
}

}  // namespace
}  // namespace distckpt
