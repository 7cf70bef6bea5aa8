#include "optim/optimizer_state.h"

#include <gtest/gtest.h>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// A column-parallel weight (8, 6) split over TP and a replicated bias (6,).
std::vector<OptimTensor> Model(const Topology& topo, int rank) {
  RankCoords c = topo.Coords(rank);
  ShardedTensor w;
  w.key = "w";
  w.dtype = DType::kBF16;
  w.global_shape = {8, 6};
  w.local_shape = {8 / topo.tp, 6};
  w.global_offset = {c.tp * (8 / topo.tp), 0};
  w.axis_fragmentations = Shape{topo.tp, 1};
  w.replica_id = {0, 0, c.dp};
  ShardedTensor b;
  b.key = "b";
  b.dtype = DType::kBF16;
  b.global_shape = b.local_shape = {6};
  b.global_offset = {0};
  b.axis_fragmentations = Shape{1};
  b.replica_id = {0, c.tp, c.dp};
  return {{"w", w}, {"b", b}};
}

std::vector<std::string> Keys(const OptimizerState& s) {
  std::vector<std::string> keys;
  for (const OptimTensor& t : s.tensors) keys.push_back(t.tensor.key);
  return keys;
}

TEST(OptimizerStateTest, PlainAdamKeysFollowMegatron) {
  Topology topo = Topology::Parse("tp=2,dp=2");
  OptimizerState s = ExpandOptimizer({}, Model(topo, 1), topo, 1);
  EXPECT_EQ(Keys(s), (std::vector<std::string>{
                         "optimizer.state.fp32_param.w", "optimizer.state.exp_avg.w",
                         "optimizer.state.exp_avg_sq.w", "optimizer.state.fp32_param.b",
                         "optimizer.state.exp_avg.b", "optimizer.state.exp_avg_sq.b"}));
  const ShardedTensor& w = s.tensors[1].tensor;
  EXPECT_EQ(w.dtype, DType::kF32);
  EXPECT_EQ(w.global_offset, (Shape{4, 0}));
  EXPECT_EQ(w.replica_id, (ReplicaId{0, 0, 0}));
  EXPECT_EQ(s.common.at("state").at("common_step").as<nlohmann::json>(), 1);
  // Param groups: weights decay, the bias does not; params are nonpersistent.
  const List& groups = s.common.at("param_groups").as<List>();  // Megatron's list
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].at("params").as<LocalNonpersistentObject>().obj, nlohmann::json({0}));
  EXPECT_EQ(groups[1].at("params").as<LocalNonpersistentObject>().obj, nlohmann::json({1}));
  EXPECT_EQ(groups[1].at("weight_decay").as<nlohmann::json>(), 0.0);
}

TEST(OptimizerStateTest, FullyReshardableKeepsModelShardingWithMainParamAsParam) {
  Topology topo = Topology::Parse("tp=2,dp=2");
  OptimizerConfig config{.format = OptimFormat::kFullyReshardable};
  OptimizerState s = ExpandOptimizer(config, Model(topo, 3), topo, 3);
  EXPECT_EQ(s.tensors[0].tensor.key, "optimizer.state.param.w");
  EXPECT_EQ(s.tensors[0].tensor.replica_id, (ReplicaId{0, 0, 1}));
  EXPECT_FALSE(s.tensors[0].tensor.flattened_range);
}

TEST(OptimizerStateTest, FullyShardedModelSpaceSlicesTheBufferOverDp) {
  // Per rank w has 24 elements at [0, 24), b 6 at [64, 70); lcm(2, 128) -> 128,
  // so DP rank 0 holds [0, 64) (all of w), DP rank 1 [64, 128) (all of b).
  Topology topo = Topology::Parse("tp=2,dp=2");
  OptimizerConfig config{.format = OptimFormat::kFullyShardedModelSpace};
  OptimizerState s0 = ExpandOptimizer(config, Model(topo, 1), topo, 1);  // tp 1, dp 0
  ASSERT_EQ(s0.tensors.size(), 3u);
  EXPECT_EQ(s0.tensors[0].tensor.key, "optimizer.state.fp32_param.w");
  EXPECT_EQ(s0.tensors[0].tensor.flattened_range, (FlatRange{0, 24}));
  OptimizerState s1 = ExpandOptimizer(config, Model(topo, 3), topo, 3);  // tp 1, dp 1
  ASSERT_EQ(s1.tensors.size(), 3u);
  EXPECT_EQ(s1.tensors[0].tensor.key, "optimizer.state.fp32_param.b");
  EXPECT_EQ(s1.tensors[0].tensor.replica_id, (ReplicaId{0, 1, 0}));  // DP dropped
  // With a small divisor the slices cut through w: lcm(2, 8) = 8, 72 -> [0, 36), [36, 72).
  config.pad_divisor = 8;
  OptimizerState cut = ExpandOptimizer(config, Model(topo, 3), topo, 3);
  ASSERT_EQ(cut.tensors.size(), 3u);
  EXPECT_EQ(cut.tensors[0].tensor.key, "optimizer.state.fp32_param.b");
  EXPECT_EQ(cut.tensors[0].tensor.flattened_range, (FlatRange{0, 6}));
}

TEST(OptimizerStateTest, DpReshardableWritesBucketSpaceSegmentsAndUnpaddedSizes) {
  Topology topo = Topology::Parse("tp=2,pp=2,dp=2");
  OptimizerConfig config{.format = OptimFormat::kDpReshardable, .pad_divisor = 8};
  int rank = topo.world_size() - 1;  // tp 1, pp 1, dp 1
  OptimizerState s = ExpandOptimizer(config, Model(topo, rank), topo, rank);
  // bf16 buffer: w [0, 24), b [64, 70): unpadded 70, padded 72, DP slices of 36.
  const std::string key =
      "optimizer.distributed.dp_group_idx_3.gbuf_idx_0.dtype_bf16.bucket_idx_0.";
  ASSERT_EQ(s.tensors.size(), 6u);  // gap [36, 64) and b [64, 70), three states each
  EXPECT_EQ(s.tensors[0].tensor.key, key + "param");
  EXPECT_EQ(s.tensors[0].tensor.global_shape, (Shape{70}));
  EXPECT_EQ(s.tensors[0].tensor.global_offset, (Shape{36}));
  EXPECT_EQ(s.tensors[0].tensor.local_shape, (Shape{28}));
  EXPECT_EQ(s.tensors[3].tensor.global_offset, (Shape{64}));
  EXPECT_FALSE(s.tensors[0].tensor.axis_fragmentations);
  ASSERT_EQ(s.objects.size(), 1u);
  EXPECT_EQ(s.objects[0].object.key,
            "optimizer.distributed.dp_group_idx_3.per_bucket_numel_unpadded");
  EXPECT_EQ(s.objects[0].object.data, nlohmann::json({{"gbuf_idx_0.dtype_bf16", {70}}}));
  EXPECT_EQ(s.objects[0].object.replica_id, (ReplicaId{0, 0, 1}));
}

// With ep > 1 the expert parameters get their own distributed optimizer over
// the expert DP group (Megatron's ChainedOptimizer of dense and expert ones).
TEST(OptimizerStateTest, ExpertParametersHaveTheirOwnInstanceOverTheExpertDpGroup) {
  Topology topo = Topology::Parse("tp=1,dp=4,ep=2");  // rank 3: dp 3, ep 1, edp 1 of 2
  const int rank = 3;
  ASSERT_EQ(topo.Coords(rank).ep, 1);
  ASSERT_EQ(topo.Coords(rank).edp, 1);
  std::vector<OptimTensor> model = Model(topo, rank);
  ShardedTensor e;
  e.key = "experts";
  e.dtype = DType::kBF16;
  e.global_shape = {2, 8};
  e.local_shape = {1, 8};
  e.global_offset = {1, 0};  // the rank's expert
  e.prepend_axis_num = 1;
  e.axis_fragmentations = Shape{2, 1};
  e.replica_id = {0, 0, 1};
  model.push_back({"experts", e, -1, /*expert=*/true});
  OptimizerConfig config{.format = OptimFormat::kDpReshardable, .pad_divisor = 8};
  OptimizerState s = ExpandOptimizer(config, model, topo, rank);
  // Expert buffer: 8 elements split over edp = 2; rank 3 holds [4, 8).
  const std::string expert = "chained_1.optimizer.distributed.dp_group_idx_1.";
  ASSERT_EQ(s.tensors.back().tensor.key, expert + "gbuf_idx_0.dtype_bf16.bucket_idx_0.exp_avg_sq");
  EXPECT_EQ(s.tensors.back().tensor.global_offset, (Shape{4}));
  EXPECT_EQ(s.tensors.back().tensor.local_shape, (Shape{4}));
  EXPECT_EQ(
      s.tensors.front().tensor.key.rfind("chained_0.optimizer.distributed.dp_group_idx_0.", 0), 0u);
  ASSERT_EQ(s.objects.size(), 2u);
  EXPECT_EQ(s.objects[1].object.key, expert + "per_bucket_numel_unpadded");
  EXPECT_EQ(s.objects[1].object.replica_id, (ReplicaId{0, 0, 1}));
  nlohmann::json common = {{"param_state_sharding_type", "dp_reshardable"},
                           {"tp", 1},
                           {"pp", 1},
                           {"ep", s.common.at("ep").as<nlohmann::json>()}};
  EXPECT_NO_THROW(CheckOptimizerResumable(common, Topology::Parse("dp=8,ep=2")));
  EXPECT_THAT([&] { CheckOptimizerResumable(common, Topology::Parse("dp=4,ep=4")); },
              ThrowsError(ErrorKind::kUnsupported, "EP mismatch after resume (2 vs 4)"));
  // fully_sharded_model_space: the expert's flattened range over edp, keys unprefixed.
  config.format = OptimFormat::kFullyShardedModelSpace;
  OptimizerState f = ExpandOptimizer(config, model, topo, rank);
  ASSERT_EQ(f.tensors.back().tensor.key, "optimizer.state.exp_avg_sq.experts");
  EXPECT_EQ(f.tensors.back().tensor.flattened_range, (FlatRange{4, 8}));
  EXPECT_EQ(f.tensors.back().tensor.replica_id, (ReplicaId{0, 0, 0}));
  // Without expert parallelism the experts share the dense buffer, unprefixed.
  Topology ep1 = Topology::Parse("tp=1,dp=4");
  config.format = OptimFormat::kDpReshardable;
  for (const OptimTensor& t : ExpandOptimizer(config, model, ep1, rank).tensors) {
    EXPECT_EQ(t.tensor.key.rfind("optimizer.distributed.dp_group_idx_0.", 0), 0u) << t.tensor.key;
  }
}

// Megatron's chained optimizer (moe-ep2 of fixtures/megatron-runs): the
// experts' member exists at EP > 1 only.
TEST(OptimizerStateTest, ExpertParamGroupsNeedExpertParallelism) {
  auto group = [](bool expert) {
    return nlohmann::json{{"wd_mult", 1.0}, {"is_expert_parallel", expert}};
  };
  nlohmann::json chained = {{"0", {{"optimizer", {{"param_groups", {group(false)}}}}}},
                            {"1", {{"optimizer", {{"param_groups", {group(true)}}}}}}};
  EXPECT_NO_THROW(CheckExpertParamGroupsResumable(chained, true, Topology::Parse("ep=2,dp=2")));
  EXPECT_NO_THROW(CheckExpertParamGroupsResumable(chained, true, Topology::Parse("ep=4,dp=4")));
  EXPECT_THAT([&] { CheckExpertParamGroupsResumable(chained, true, Topology::Parse("dp=2")); },
              ThrowsError(ErrorKind::kUnsupported, "param groups do not fit ep=1"));
  // Saved at EP=1 (one optimizer, no expert groups): EP > 1 builds them.
  nlohmann::json dense = {{"optimizer", {{"param_groups", {group(false), group(false)}}}}};
  EXPECT_NO_THROW(CheckExpertParamGroupsResumable(dense, true, Topology::Parse("dp=2")));
  EXPECT_THAT([&] { CheckExpertParamGroupsResumable(dense, true, Topology::Parse("ep=2,dp=2")); },
              ThrowsError(ErrorKind::kUnsupported, "has no expert-parallel param groups"));
  // A dense model under ep > 1 builds none; groups that do not say pass.
  EXPECT_NO_THROW(CheckExpertParamGroupsResumable(dense, false, Topology::Parse("ep=2,dp=2")));
  nlohmann::json silent = {{"param_groups", {{{"lr", 1.0}}}}};
  EXPECT_NO_THROW(CheckExpertParamGroupsResumable(silent, true, Topology::Parse("dp=2")));
}

TEST(OptimizerStateTest, StepMustBeSharedAcrossParameters) {
  EXPECT_EQ(CommonStep({7, 7, 7}), 7);
  EXPECT_THAT(
      [] {
        CommonStep({7, 8});
      },
      ThrowsError(ErrorKind::kInvalidArgument, "The optimizer step differs per parameter"));
  Topology topo = Topology::Parse("tp=1");
  OptimizerConfig config{.uneven_step = true};
  EXPECT_THAT([&] { ExpandOptimizer(config, Model(topo, 0), topo, 0); },
              ThrowsError(ErrorKind::kInvalidArgument, "step differs"));
}

TEST(OptimizerStateTest, DpReshardableRefusesOtherTpOrPp) {
  nlohmann::json saved = {{"param_state_sharding_type", "dp_reshardable"}, {"tp", 2}, {"pp", 2}};
  EXPECT_NO_THROW(CheckOptimizerResumable(saved, Topology::Parse("tp=2,pp=2,dp=4")));
  EXPECT_THAT(
      [&] { CheckOptimizerResumable(saved, Topology::Parse("tp=2,pp=4")); },
      ThrowsError(ErrorKind::kUnsupported, "(TP, PP) mismatch after resume ((2, 2) vs (2, 4))"));
  saved["param_state_sharding_type"] = "fully_reshardable";
  EXPECT_NO_THROW(CheckOptimizerResumable(saved, Topology::Parse("tp=2,pp=4")));
}

TEST(OptimizerStateTest, FormatNamesRoundTripAndUnknownIsRefused) {
  for (const char* name :
       {"plain", "fully_sharded_model_space", "dp_reshardable", "fully_reshardable"}) {
    EXPECT_EQ(OptimFormatName(ParseOptimFormat(name)), name);
  }
  EXPECT_THAT([] { ParseOptimFormat("fully_sharded_bucket_space"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown optimizer format"));
}

}  // namespace
}  // namespace distckpt
