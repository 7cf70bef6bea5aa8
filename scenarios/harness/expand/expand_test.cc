#include "harness/expand/expand.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "core/error_testing.h"
#include "mapping/validation.h"

namespace distckpt {
namespace {

TensorSpec Spec(const std::string& text) {
  return ParseTensorSpec(nlohmann::json::parse(text), "$");
}

GlobalMetadata AllRanks(const TensorSpec& spec, const Topology& topo) {
  GlobalMetadata global;
  for (int r = 0; r < topo.world_size(); ++r) {
    LocalMetadata local;
    for (ShardedTensor& t : ExpandTensor(spec, topo, r)) {
      if (!t.flattened_range || t.flattened_range->size() > 0) local.push_back(t);
    }
    global.push_back(local);
  }
  return global;
}

TEST(ExpandTest, MegatronReplicaIdsForATpShardedTensor) {
  TensorSpec spec = Spec(R"({"key": "w", "shape": [4, 2], "shard": {"0": "tp"}})");
  Topology topo = Topology::Parse("tp=2,pp=2,dp=2");
  // rank 7: tp=1, dp=1, pp=1 -> replica (pp, 0, dp) = (1, 0, 1)
  ShardedTensor t = ExpandTensor(spec, topo, 7).front();
  EXPECT_EQ(t.replica_id, (ReplicaId{1, 0, 1}));
  EXPECT_EQ(t.global_offset, (Shape{2, 0}));
  EXPECT_EQ(t.axis_fragmentations, (Shape{2, 1}));
}

// Megatron's apply_swiglu_sharded_factory: a rank holds [W_p; V_p], two
// pieces of one parameter at offsets p*n and F/2 + p*n, 2*tp fragments each.
TEST(ExpandTest, GluTensorIsWAndVHalvesEachSplitOverTp) {
  TensorSpec spec = Spec(R"({"key": "fc1", "shape": [8, 2], "shard": {"0": "tp"}, "glu": true})");
  Topology topo = Topology::Parse("tp=2");
  std::vector<Param> params = ExpandTensorParams(spec, topo, 1);
  ASSERT_EQ(params.size(), 1u);
  ASSERT_EQ(params[0].pieces.size(), 2u);
  const ShardedTensor& w = params[0].pieces[0];
  const ShardedTensor& v = params[0].pieces[1];
  EXPECT_EQ(w.global_shape, (Shape{8, 2}));
  EXPECT_EQ(w.local_shape, (Shape{2, 2}));
  EXPECT_EQ(w.global_offset, (Shape{2, 0}));
  EXPECT_EQ(v.global_offset, (Shape{6, 0}));
  EXPECT_EQ(w.axis_fragmentations, (Shape{4, 1}));
  EXPECT_EQ(params[0].path, "fc1");
  // Every rank's pieces tile the [W; V] tensor exactly once.
  EXPECT_NO_THROW(ValidateShardingIntegrity(AllRanks(spec, Topology::Parse("tp=4"))));
  TensorSpec stacked = Spec(
      R"({"key": "s", "shape": [4, 2], "shard": {"0": "tp"}, "glu": true,
          "stack": {"shape": [4], "over": "pp"}})");
  std::vector<Param> layers = ExpandTensorParams(stacked, Topology::Parse("tp=2,pp=2"), 3);
  ASSERT_EQ(layers.size(), 2u);  // pp rank 1 holds layers 2 and 3
  EXPECT_EQ(layers[1].path, "s.3");
  EXPECT_EQ(layers[1].pieces[1].global_offset, (Shape{3, 3, 0}));
  EXPECT_THAT([] { Spec(R"({"key": "odd", "shape": [3, 2], "glu": true})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.glu: a GLU tensor needs an even axis 0"));
}

// Megatron's layer stacking: prepend_axis_num 1, layers in contiguous
// blocks over the pp x vpp virtual stages (stage v*pp + pp_rank), the pp
// coordinate no longer a replica component, each layer at "<key>.<layer>".
TEST(ExpandTest, StackedLayersFollowTheVirtualPipelineStages) {
  const TensorSpec spec = Spec(
      R"({"key": "w", "shape": [6, 4], "shard": {"0": "tp"}, "stack": {"shape": [8], "over": "pp"}})");
  const Topology topo = Topology::Parse("tp=2,pp=2,vpp=2");
  const int rank = topo.RankOf(RankCoords{.tp = 1, .pp = 1});
  const std::vector<ShardedTensor> mine = ExpandTensor(spec, topo, rank);
  std::vector<int64_t> layers;
  for (const ShardedTensor& t : mine) {
    layers.push_back(t.global_offset[0]);
    EXPECT_EQ(t.prepend_axis_num, 1);
    EXPECT_EQ(t.global_shape, (Shape{8, 6, 4}));
    EXPECT_EQ(t.local_shape, (Shape{3, 4}));
    EXPECT_EQ(t.global_offset[1], 3);
    EXPECT_EQ(t.axis_fragmentations, (Shape{8, 2, 1}));
    EXPECT_EQ(t.replica_id, (ReplicaId{0, 0, 0}));
  }
  EXPECT_EQ(layers, (std::vector<int64_t>{2, 3, 6, 7}));  // stages 1 and 3 of 4, two layers each
  EXPECT_EQ(ParamPath(spec, mine[1]), "w.3");
  EXPECT_EQ(LogicalShape(spec), (Shape{8, 6, 4}));
  EXPECT_NO_THROW(ValidateShardingIntegrity(AllRanks(spec, topo)));
  EXPECT_THAT(
      [&] { ExpandTensor(spec, Topology::Parse("pp=3"), 0); },
      ThrowsError(
          ErrorKind::kInvalidArgument,
          "tensor 'w': stack axis of 8 cannot be split into pp*vpp=3 virtual pipeline stages"));
}

TEST(ExpandTest, AStackWithoutOverIsHeldWholeByEveryRank) {
  const TensorSpec spec =
      Spec(R"({"key": "e", "shape": [5], "flatten": "dp", "stack": {"shape": [2, 3]}})");
  const Topology topo = Topology::Parse("pp=2,dp=2");
  const std::vector<ShardedTensor> mine = ExpandTensor(spec, topo, 3);
  ASSERT_EQ(mine.size(), 6u);
  EXPECT_EQ(mine[4].global_offset, (Shape{1, 1, 0}));
  EXPECT_EQ(ParamPath(spec, mine[4]), "e.1.1");
  EXPECT_EQ(mine[4].prepend_axis_num, 2);
  EXPECT_EQ(mine[4].flattened_range, (FlatRange{2, 5}));
  EXPECT_EQ(mine[4].replica_id[0], 1);  // pp is a replica dim here
  EXPECT_NO_THROW(ValidateShardingIntegrity(AllRanks(spec, topo)));
}

TEST(ExpandTest, EveryLayoutOfEverySpecTilesTheTensorWithMainReplicas) {
  const char* specs[] = {
      R"({"key": "a", "shape": [24, 36], "shard": {"0": "tp", "1": "pp"}})",
      R"({"key": "b", "shape": [10, 7], "shard": {"0": ["tp", "dp"]}, "split": "chunk"})",
      R"({"key": "c", "shape": [12, 5, 8], "shard": {"0": "tp", "2": "pp"}, "flatten": "dp"})",
      R"({"key": "d", "shape": [1000, 16], "shard": {"0": "tp"}, "pad_multiple": 128})",
      R"({"key": "e", "shape": [36]})",
      R"({"key": "f", "shape": [8, 4], "shard": {"0": "ep"}})",
  };
  for (const char* topo_text : {"tp=1", "tp=3,dp=2", "tp=2,pp=2,dp=2", "tp=2,cp=2", "dp=4,ep=2",
                                "tp=4,pp=2", "pp=2,dp=3"}) {
    Topology topo = Topology::Parse(topo_text);
    for (const char* text : specs) {
      TensorSpec spec = Spec(text);
      EXPECT_NO_THROW(ValidateShardingIntegrity(AllRanks(spec, topo)))
          << spec.key << " " << topo_text;
    }
  }
}

TEST(ExpandTest, ChunkSplitGivesTrailingEmptyShards) {
  TensorSpec spec = Spec(R"({"key": "u", "shape": [5], "shard": {"0": "dp"}, "split": "chunk"})");
  Topology topo = Topology::Parse("dp=4");
  std::vector<int64_t> sizes;
  for (int r = 0; r < 4; ++r) sizes.push_back(ExpandTensor(spec, topo, r).front().local_shape[0]);
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1, 0}));  // torch.chunk(5, 4)
  EXPECT_FALSE(ExpandTensor(spec, topo, 0).front().axis_fragmentations);
}

TEST(ExpandTest, IndivisibleEvenSplitIsRefusedNamingTheAxis) {
  TensorSpec spec = Spec(R"({"key": "w", "shape": [10, 4], "shard": {"0": ["tp", "dp"]}})");
  EXPECT_THAT(
      [&] { ExpandTensor(spec, Topology::Parse("tp=2,dp=2"), 0); },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "tensor 'w' axis 0 of size 10 cannot be split evenly into tp*dp=4 parts"));
}

TEST(ExpandTest, VocabPaddingDependsOnTp) {
  TensorSpec spec =
      Spec(R"({"key": "e", "shape": [1000, 16], "shard": {"0": "tp"}, "pad_multiple": 128})");
  EXPECT_EQ(ExpandTensor(spec, Topology::Parse("tp=1"), 0).front().global_shape[0], 1024);
  EXPECT_EQ(ExpandTensor(spec, Topology::Parse("tp=3"), 0).front().global_shape[0], 1152);
  EXPECT_TRUE(ExpandTensor(spec, Topology::Parse("tp=3"), 0).front().allow_shape_mismatch);
}

TEST(ExpandTest, JitteredFlatRangesAreMegatrons) {
  TensorSpec spec = Spec(R"({"key": "f", "shape": [8, 5, 40], "shard": {"0": "tp", "2": "pp"},
                            "flatten": "dp", "flatten_jitter": true})");
  Topology topo = Topology::Parse("tp=2,pp=2,dp=2,order=tp-dp-pp");
  // chunk (4, 5, 20) = 400 elements, n = 200: dp0 [0, 201), dp1 [201, 400)
  EXPECT_EQ(ExpandTensor(spec, topo, 0).front().flattened_range, (FlatRange{0, 201}));
  EXPECT_EQ(ExpandTensor(spec, topo, 2).front().flattened_range, (FlatRange{201, 400}));
}

TEST(ExpandTest, CheckLoadedExpectsEmptyFlattenedRangesDroppedByLoad) {
  // One element flattened over tp=2: rank 0's range is [0, 0), which load
  // drops (docs/megatron-semantics.md §1.8); rank 1's is [0, 1).
  Scenario s = Scenario::FromJson(nlohmann::json::parse(R"({"tensors": [
      {"key": "t0", "shape": [], "dtype": "f32", "flatten": "tp"}]})"),
                                  "$");
  Topology topo = Topology::Parse("tp=2");
  ASSERT_EQ(ExpandTensor(s.tensors[0], topo, 0).front().flattened_range, (FlatRange{0, 0}));
  LoadResult dropped;
  dropped.state_dict = Node(Dict{{"tensors", Node(Dict{})}, {"objects", Node(Dict{})}});
  EXPECT_EQ(CheckLoaded(s, nullptr, topo, topo, 0, dropped), std::nullopt);
  LoadResult kept;
  kept.state_dict =
      Node(Dict{{"tensors", Node(Dict{{"t0", Node(Tensor::Zeros(DType::kF32, {0}))}})},
                {"objects", Node(Dict{})}});
  EXPECT_THAT(CheckLoaded(s, nullptr, topo, topo, 0, kept).value_or(""),
              ::testing::HasSubstr("key 't0' (at 't0') has an empty flattened range"));
  // Rank 1's non-empty range is still required.
  EXPECT_THAT(CheckLoaded(s, nullptr, topo, topo, 1, dropped).value_or(""),
              ::testing::HasSubstr("missing from the loaded state"));
}

TEST(ExpandTest, ObjectsHaveOneMainReplicaPerGridCell) {
  Scenario s;
  s.objects = {{"rng", {MeshDim::kPp, MeshDim::kTp}}};
  Topology topo = Topology::Parse("tp=2,pp=2,dp=3");
  GlobalMetadata global;
  for (int r = 0; r < topo.world_size(); ++r)
    global.push_back({ExpandObject(s.objects[0], 1, topo, r)});
  EXPECT_NO_THROW(ValidateShardingIntegrity(global));
  EXPECT_EQ(ExpandObject(s.objects[0], 1, topo, 3).UniqueKey(), "rng/shard_0.1_2.2");
}

Scenario ParseScenario(const char* text) {
  return Scenario::FromJson(nlohmann::json::parse(text), "$");
}

TEST(ExpandTest, FsdpReshardsEligibleTensorSpecsAndLoadCanOverrideTheLayout) {
  Scenario s = ParseScenario(R"({"tensors": [{"key": "w", "shape": [3, 4]},
                                             {"key": "d", "shape": [4], "shard": {"0": "dp"}, "split": "chunk"}],
                                 "fsdp": {"layout": "fsdp2"}})");
  Topology topo = Topology::Parse("dp=5");
  RankState r2 = ExpandRank(s, topo, 2);
  EXPECT_EQ(r2.params[0].pieces[0].local_shape, (Shape{1, 4}));
  EXPECT_EQ(r2.params[0].pieces[0].global_offset, (Shape{2, 0}));
  EXPECT_EQ(r2.params[0].pieces[0].replica_id, (ReplicaId{0, 0, 0}));
  EXPECT_EQ(ExpandRank(s, topo, 4).params[0].pieces[0].local_shape,
            (Shape{0, 4}));  // more ranks than rows
  EXPECT_EQ(r2.params[1].pieces[0].replica_id,
            (ReplicaId{0, 0, 0}));  // dp-chunked: not FSDP-managed
  EXPECT_EQ(r2.params[1].pieces[0].global_offset, (Shape{2}));
  RankState plain = ExpandRank(s, topo, 2, nullptr, nullptr, FsdpLayout::kNone);
  EXPECT_EQ(plain.params[0].pieces[0].local_shape, (Shape{3, 4}));
  EXPECT_EQ(plain.params[0].pieces[0].replica_id, (ReplicaId{0, 0, 2}));
}

TEST(ExpandTest, OptimizerStateFollowsTheModelAndItsOverrides) {
  Scenario s =
      ParseScenario(R"({"model": {"kind": "gpt", "layers": 2, "hidden": 8, "ffn": 16, "heads": 2,
                                           "vocab": 64, "glu": true},
                                 "optimizer": {"kind": "adam", "format": "fully_reshardable"}})");
  Topology topo = Topology::Parse("tp=2,dp=2");
  RankState st = ExpandRank(s, topo, 0);
  int exp_avg = 0, model = 0;
  for (const Param& p : st.params) {
    if (p.key().rfind("optimizer.state.exp_avg.", 0) == 0) ++exp_avg;
    if (p.key().rfind("optimizer.", 0) != 0) model += static_cast<int>(p.pieces.size());
  }
  EXPECT_EQ(exp_avg, model);  // one per model piece (GLU halves separately)
  EXPECT_EQ(st.optimizer.at("param_state_sharding_type").as<nlohmann::json>(), "fully_reshardable");
  Scenario dp = s;
  dp.optimizer->format = OptimFormat::kDpReshardable;
  RankState bucket = ExpandRank(dp, topo, 1, nullptr, {{"pad_divisor", 8}});
  ASSERT_FALSE(bucket.objects.empty());
  EXPECT_EQ(bucket.objects.back().object.key,
            "optimizer.distributed.dp_group_idx_1.per_bucket_numel_unpadded");
}

// A real checkpoint without TransformerEngine's per-layer _extra_state and a
// listed object: the request built for it (verify, reshard) asks only for the
// objects it stores on the same grid (README: "requested where the checkpoint
// stores the same key on the same grid").
TEST(ExpandTest, RequestForARealCheckpointAsksOnlyForStoredObjects) {
  Scenario s = ParseScenario(R"({"model": {"kind": "gpt", "layers": 2, "hidden": 8, "ffn": 16,
                                           "heads": 2, "vocab": 64},
                                 "objects": [{"key": "listed", "per": ["tp"]}]})");
  Topology topo = Topology::Parse("tp=2");
  auto object_keys = [](const Node& request) {
    std::set<std::string> keys;
    for (const auto& [path, o] : request.at("objects").as<Dict>())
      keys.insert(o.as<ShardedObject>().key);
    return keys;
  };
  std::set<std::string> scenario_keys = object_keys(BuildLoadRequest(s, nullptr, topo, topo, 0));
  EXPECT_TRUE(scenario_keys.count("decoder.layers.0.self_attention.linear_qkv._extra_state") ||
              scenario_keys.count("decoder.layers.self_attention.linear_qkv._extra_state"));
  const std::map<std::string, Shape> stored = {{"rng_state", {1, 2}}};
  RequestOptions options;
  options.stored_objects = &stored;
  EXPECT_EQ(object_keys(BuildLoadRequest(s, nullptr, topo, topo, 0, options)),
            (std::set<std::string>{"rng_state"}));
  const std::map<std::string, Shape> other_grid = {{"rng_state", {1, 1}}, {"listed", {2}}};
  options.stored_objects = &other_grid;
  EXPECT_EQ(object_keys(BuildLoadRequest(s, nullptr, topo, topo, 0, options)),
            (std::set<std::string>{"listed"}));
}

}  // namespace
}  // namespace distckpt
