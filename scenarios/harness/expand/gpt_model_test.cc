#include "harness/expand/gpt_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "core/error_testing.h"
#include "mapping/validation.h"

namespace distckpt {
namespace {

GptConfig Config(const std::string& text) {
  return ParseGptConfig(nlohmann::json::parse(text), "$.model");
}

std::map<std::string, Param> ByPath(const GptConfig& c, const std::string& topo, int rank) {
  std::map<std::string, Param> out;
  for (Param& p : ExpandGptParams(c, Topology::Parse(topo), rank)) out[p.path] = p;
  return out;
}

TEST(GptModelTest, ColumnAndRowParallelOffsetsOnTheStackedLayerAxis) {
  GptConfig c = Config(R"({"layers": 4, "hidden": 8, "ffn": 16, "heads": 2, "vocab": 10})");
  // tp=2, pp=2: rank 3 = (tp 1, pp 1) holds global layers 2 and 3.
  auto params = ByPath(c, "tp=2,pp=2", 3);
  const ShardedTensor& qkv =
      params.at("decoder.layers.3.self_attention.linear_qkv.weight").pieces[0];
  EXPECT_EQ(qkv.key, "decoder.layers.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.global_shape, (Shape{4, 24, 8}));
  EXPECT_EQ(qkv.local_shape, (Shape{12, 8}));
  EXPECT_EQ(qkv.global_offset, (Shape{3, 12, 0}));
  EXPECT_EQ(qkv.prepend_axis_num, 1);
  EXPECT_EQ(qkv.replica_id, (ReplicaId{0, 0, 0}));
  const ShardedTensor& proj =
      params.at("decoder.layers.2.self_attention.linear_proj.weight").pieces[0];
  EXPECT_EQ(proj.global_offset, (Shape{2, 0, 4}));
  const ShardedTensor& norm = params.at("decoder.layers.2.input_layernorm.weight").pieces[0];
  EXPECT_EQ(norm.replica_id, (ReplicaId{0, 1, 0}));  // replicated over TP
  EXPECT_FALSE(params.count("embedding.word_embeddings.weight"));
  EXPECT_TRUE(params.count("output_layer.weight"));
}

TEST(GptModelTest, GluFc1IsAFactoryOfWAndVHalves) {
  GptConfig c =
      Config(R"({"layers": 2, "hidden": 4, "ffn": 8, "heads": 2, "vocab": 10, "glu": true})");
  auto params = ByPath(c, "tp=2", 1);
  const Param& fc1 = params.at("decoder.layers.0.mlp.linear_fc1.weight");
  ASSERT_EQ(fc1.pieces.size(), 2u);
  EXPECT_EQ(fc1.pieces[0].global_shape, (Shape{2, 16, 4}));
  EXPECT_EQ(fc1.pieces[0].global_offset, (Shape{0, 4, 0}));   // W_1
  EXPECT_EQ(fc1.pieces[1].global_offset, (Shape{0, 12, 0}));  // V_1 = after all W
  EXPECT_EQ(fc1.pieces[0].axis_fragmentations, (Shape{2, 4, 1}));
}

TEST(GptModelTest, VocabPaddingAndTiedOutput) {
  GptConfig c =
      Config(R"({"layers": 2, "hidden": 6, "ffn": 12, "heads": 3, "vocab": 1000, "tied": true})");
  auto first = ByPath(c, "tp=3,pp=2", 0);
  const ShardedTensor& emb = first.at("embedding.word_embeddings.weight").pieces[0];
  EXPECT_EQ(emb.global_shape, (Shape{1152, 6}));  // 1000 padded to a multiple of 128*3
  EXPECT_TRUE(emb.allow_shape_mismatch);
  EXPECT_EQ(first.at("embedding.word_embeddings.weight").logical_shape, (Shape{1000, 6}));
  auto last = ByPath(c, "tp=3,pp=2", 3);  // (tp 0, pp 1)
  const ShardedTensor& out = last.at("output_layer.weight").pieces[0];
  EXPECT_EQ(out.key, "embedding.word_embeddings.weight");
  EXPECT_FALSE(IsMainReplica(out.replica_id));
  EXPECT_FALSE(ByPath(c, "tp=1", 0).count("output_layer.weight"));  // same stage: nothing extra
}

TEST(GptModelTest, VirtualStagesAndLayoutsGiveGlobalLayerNumbers) {
  GptConfig c = Config(R"({"layers": 8, "hidden": 4, "ffn": 8, "heads": 2, "vocab": 10,
      "pipeline_layout": [["embedding", "decoder"], ["decoder", "decoder", "decoder", "decoder", "decoder",
                                                     "decoder", "decoder", "loss"]]})");
  // pp=2, vpp=2: rank 1 (pp 1) holds stages 1 and 3: layers 2-3 and 6-7.
  auto vpp = ByPath(c, "pp=2,vpp=2", 1);
  for (int g : {2, 3, 6, 7})
    EXPECT_TRUE(vpp.count(fmt::format("decoder.layers.{}.input_layernorm.weight", g))) << g;
  EXPECT_FALSE(vpp.count("decoder.layers.4.input_layernorm.weight"));
  // The 2-stage layout: rank 0 holds the embedding and layer 0 only.
  auto layout = ByPath(c, "pp=2", 0);
  EXPECT_TRUE(layout.count("embedding.word_embeddings.weight"));
  EXPECT_TRUE(layout.count("decoder.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(layout.count("decoder.layers.1.input_layernorm.weight"));
}

TEST(GptModelTest, ExpertsUseGlobalIndicesAndExpertDataParallelReplicas) {
  GptConfig c =
      Config(R"({"layers": 2, "hidden": 4, "ffn": 8, "heads": 2, "vocab": 10, "experts": 4,
                           "moe_layer_freq": [0, 1]})");
  // dp=4, ep=2: rank 3 has ep 1, edp 1 -> experts 2 and 3, replica (0, 0, 1).
  auto params = ByPath(c, "dp=4,ep=2", 3);
  ASSERT_TRUE(params.count("decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"));
  const ShardedTensor& e3 =
      params.at("decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight").pieces[0];
  EXPECT_EQ(e3.key,
            "decoder.layers.1.mlp.experts.linear_fc1.weight");  // non-homogeneous: per-layer key
  EXPECT_EQ(e3.global_shape, (Shape{4, 8, 4}));
  EXPECT_EQ(e3.global_offset, (Shape{3, 0, 0}));
  EXPECT_EQ(e3.replica_id, (ReplicaId{0, 0, 1}));
  EXPECT_TRUE(params.count("decoder.layers.0.mlp.linear_fc1.weight"));  // layer 0 is dense
}

TEST(GptModelTest, EveryRankLayoutTilesEveryKey) {
  GptConfig c =
      Config(R"({"layers": 4, "hidden": 12, "ffn": 24, "heads": 12, "vocab": 100, "glu": true,
                           "experts": 4, "moe_layer_freq": [0, 1, 1, 0]})");
  GptConfig tied = Config(R"({"prefix": "t.", "layers": 4, "hidden": 12, "ffn": 24, "heads": 12,
                              "vocab": 100, "tied": true, "experts": 4})");
  for (const char* text : {"tp=1", "tp=3,pp=2", "tp=2,pp=2,vpp=2", "dp=4,ep=4", "tp=2,cp=2,ep=2",
                           "tp=6", "pp=4,dp=2,ep=2"}) {
    Topology topo = Topology::Parse(text);
    for (const GptConfig* config : {&c, &tied}) {
      GlobalMetadata global;
      for (int r = 0; r < topo.world_size(); ++r) {
        LocalMetadata local;
        for (const Param& p : ExpandGptParams(*config, topo, r)) {
          for (const ShardedTensor& piece : p.pieces) local.push_back(piece);
        }
        for (const ObjectParam& o : ExpandGptObjects(*config, 1, topo, r))
          local.push_back(o.object);
        global.push_back(std::move(local));
      }
      EXPECT_NO_THROW(ValidateShardingIntegrity(global)) << text << " " << config->prefix;
    }
  }
}

TEST(GptModelTest, IndivisibleTopologiesAreRefusedNamingTheDimension) {
  GptConfig c =
      Config(R"({"layers": 6, "hidden": 12, "ffn": 24, "heads": 4, "vocab": 10, "experts": 4})");
  EXPECT_THAT([&] { CheckGptTopology(c, Topology::Parse("tp=3")); },
              ThrowsError(ErrorKind::kInvalidArgument, "gpt heads=4 is not divisible by tp=3"));
  EXPECT_THAT(
      [&] { CheckGptTopology(c, Topology::Parse("pp=4")); },
      ThrowsError(ErrorKind::kInvalidArgument, "gpt layers=6 cannot be split into pp*vpp=4"));
  EXPECT_THAT([&] { CheckGptTopology(c, Topology::Parse("dp=3,ep=3")); },
              ThrowsError(ErrorKind::kInvalidArgument, "gpt experts=4 is not divisible by ep=3"));
  EXPECT_NO_THROW(CheckGptTopology(c, Topology::Parse("tp=2,pp=3,dp=2,ep=2")));
}

TEST(GptModelTest, BadConfigsNameTheField) {
  EXPECT_THAT([] { Config(R"({"layers": 0})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.model.layers"));
  EXPECT_THAT([] { Config(R"({"kind": "bert"})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "only \"gpt\""));
  EXPECT_THAT([] { Config(R"({"colour": 1})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown field 'colour'"));
  EXPECT_THAT([] { Config(R"({"layers": 2, "moe_layer_freq": [1]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "moe_layer_freq"));
  EXPECT_THAT([] { Config(R"({"pipeline_layout": [["embedding", "encoder"]]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.model.pipeline_layout[0]"));
}

}  // namespace
}  // namespace distckpt
