// The HF plans and the exact-or-refused accounting (interop/hf/plan.h,
// interop/hf/accounting.h) on synthetic stored shapes.
#include "interop/hf/plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "core/error_testing.h"
#include "interop/hf/accounting.h"
#include "interop/hf/import.h"
#include "io/memory_env.h"

namespace distckpt {
namespace {

using Stored = std::vector<std::pair<std::string, Shape>>;

GptExportSpec Spec() {
  GptExportSpec s;
  s.layers = 2;
  s.hidden = 8;
  s.heads = 2;
  s.query_groups = 2;
  s.ffn = 16;
  s.vocab = 30;
  s.tied = true;
  return s;
}

// Megatron's default GPT (fused norm names, every bias, learned positions, vocab padded to 32).
Stored DefaultGpt() {
  const std::string l = "decoder.layers.";
  return {{"embedding.word_embeddings.weight", {32, 8}},
          {"embedding.position_embeddings.weight", {16, 8}},
          {l + "self_attention.linear_qkv.layer_norm_weight", {2, 8}},
          {l + "self_attention.linear_qkv.layer_norm_bias", {2, 8}},
          {l + "self_attention.linear_qkv.weight", {2, 24, 8}},
          {l + "self_attention.linear_qkv.bias", {2, 24}},
          {l + "self_attention.linear_proj.weight", {2, 8, 8}},
          {l + "self_attention.linear_proj.bias", {2, 8}},
          {l + "mlp.linear_fc1.layer_norm_weight", {2, 8}},
          {l + "mlp.linear_fc1.layer_norm_bias", {2, 8}},
          {l + "mlp.linear_fc1.weight", {2, 16, 8}},
          {l + "mlp.linear_fc1.bias", {2, 16}},
          {l + "mlp.linear_fc2.weight", {2, 8, 16}},
          {l + "mlp.linear_fc2.bias", {2, 8}},
          {"decoder.final_layernorm.weight", {8}},
          {"decoder.final_layernorm.bias", {8}},
          {"optimizer.state.exp_avg.embedding.word_embeddings.weight", {32, 8}}};
}

std::vector<StoredInfo> Infos(const Stored& stored) {
  std::vector<StoredInfo> out;
  for (const auto& [k, s] : stored) out.push_back({k, s, DType::kF32});
  return out;
}

TEST(HfPlanTest, DefaultGptIsGpt2WithEveryTensorPlaced) {
  const Stored stored = DefaultGpt();
  HfExportPlan plan = PlanHfExport(Spec(), stored);
  EXPECT_EQ(plan.architecture.model_type, "gpt2");
  std::map<std::string, const HfTensor*> by_name;
  for (const HfTensor& t : plan.tensors) by_name[t.name] = &t;
  ASSERT_TRUE(by_name.count("transformer.wpe.weight"));
  // Conv1D: [in, out]; c_attn's rows are q of both heads, then k, then v (Megatron: per head).
  const HfTensor& attn = *by_name.at("transformer.h.1.attn.c_attn.weight");
  EXPECT_TRUE(attn.transpose);
  EXPECT_EQ(attn.shape, (Shape{8, 24}));
  ASSERT_EQ(attn.pieces.size(), 6u);
  EXPECT_EQ(attn.pieces[0].offset, (Shape{1, 0, 0}));   // head 0 q
  EXPECT_EQ(attn.pieces[1].offset, (Shape{1, 12, 0}));  // head 1 q
  EXPECT_EQ(attn.pieces[2].offset, (Shape{1, 4, 0}));   // head 0 k
  EXPECT_EQ(by_name.at("transformer.h.0.mlp.c_fc.weight")->shape, (Shape{8, 16}));
  ExportAccount a = AccountExport(&plan.tensors, Infos(stored), "", {});
  EXPECT_TRUE(a.unplaced.empty()) << a.unplaced.front();
  EXPECT_EQ(a.optimizer_tensors, 1u);
  EXPECT_EQ(a.padding_bytes, 2u * 8 * 4);  // rows 30, 31
  EXPECT_EQ(a.exported_bytes + a.padding_bytes, a.model_bytes);
}

TEST(HfPlanTest, AStoredTensorNoPieceHoldsIsUnplacedUnlessDropped) {
  Stored stored = DefaultGpt();
  stored.push_back({"decoder.extra_scale", {8}});
  HfExportPlan plan = PlanHfExport(Spec(), stored);
  ExportAccount a = AccountExport(&plan.tensors, Infos(stored), "", {});
  ASSERT_EQ(a.unplaced.size(), 1u);
  EXPECT_NE(a.unplaced[0].find("decoder.extra_scale"), std::string::npos);
  plan = PlanHfExport(Spec(), stored);
  const size_t before = plan.tensors.size();
  a = AccountExport(&plan.tensors, Infos(stored), "", {"decoder.extra_*", "transformer.wpe.*"});
  EXPECT_TRUE(a.unplaced.empty());
  EXPECT_EQ(a.dropped.size(), 2u);
  EXPECT_EQ(plan.tensors.size(), before - 1);
  EXPECT_EQ(a.exported_bytes + a.padding_bytes + a.dropped_bytes, a.model_bytes);
}

TEST(HfPlanTest, APieceMissingFromAPlanIsUnplaced) {
  const Stored stored = DefaultGpt();
  HfExportPlan plan = PlanHfExport(Spec(), stored);
  for (HfTensor& t : plan.tensors) {
    if (t.name == "transformer.h.0.attn.c_attn.bias") t.pieces.pop_back();  // head 1's v
  }
  ExportAccount a = AccountExport(&plan.tensors, Infos(stored), "", {});
  ASSERT_EQ(a.unplaced.size(), 1u);
  EXPECT_NE(a.unplaced[0].find("linear_qkv.bias"), std::string::npos);
}

TEST(HfPlanTest, UnsupportedFeaturesAreNamed) {
  Stored stored = DefaultGpt();
  GptExportSpec spec = Spec();
  spec.args = {{"normalization", "RMSNorm"}, {"position_embedding_type", "learned_absolute"}};
  try {
    PlanHfExport(spec, stored);
    FAIL() << "RMSNorm with learned positions and GELU exported";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("RMSNorm + learned_absolute positions + GELU"),
              std::string::npos)
        << e.what();
  }
  spec = Spec();
  spec.args = {{"qk_layernorm", true}, {"use_rope_scaling", true}};
  try {
    PlanHfExport(spec, stored);
    FAIL() << "qk_layernorm exported";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("qk_layernorm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use_rope_scaling"), std::string::npos) << e.what();
  }
}

TEST(HfPlanTest, GlobMatch) {
  EXPECT_TRUE(GlobMatch("decoder.*.bias", "decoder.layers.mlp.linear_fc1.bias"));
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
  EXPECT_FALSE(GlobMatch("a?c", "abbc"));
  EXPECT_FALSE(GlobMatch("*.weight", "x.bias"));
  EXPECT_TRUE(GlobMatch("*", ""));
}

// A spec's fields of the wrong type are refused naming the field, not a bare
// nlohmann type_error (issue 39: every error names its source).
TEST(GptExportSpecFromJson, WrongTypesNameTheField) {
  const nlohmann::json ok = {
      {"layers", 1}, {"hidden", 8}, {"heads", 2}, {"ffn", 16}, {"vocab", 16}};
  EXPECT_EQ(GptExportSpecFromJson(ok, "s.json").layers, 1);
  auto with = [&](const char* field, nlohmann::json value) {
    nlohmann::json j = ok;
    j[field] = std::move(value);
    return j;
  };
  EXPECT_THAT([&] { GptExportSpecFromJson(with("prefix", 5), "s.json"); },
              ThrowsError(ErrorKind::kInvalidArgument, "spec s.json: 'prefix' must be a string"));
  EXPECT_THAT([&] { GptExportSpecFromJson(with("glu", "yes"), "s.json"); },
              ThrowsError(ErrorKind::kInvalidArgument, "spec s.json: 'glu' must be true or false"));
  EXPECT_THAT([&] { GptExportSpecFromJson(with("tied", 1), "s.json"); },
              ThrowsError(ErrorKind::kInvalidArgument, "'tied' must be true or false"));
  EXPECT_THAT(
      [&] {
        GptExportSpecFromJson({{"model", "gpt"}}, "s.json");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "spec s.json: holds a string"));
  EXPECT_THAT([&] { GptExportSpecFromJson(nlohmann::json::array(), "s.json"); },
              ThrowsError(ErrorKind::kInvalidArgument, "spec s.json: holds a array"));
}

// config.json's num_experts_per_tok, read when a MoE spec gives no top-k, is
// checked, naming the file (it was a bare type_error for a string).
TEST(WriteHfUnsharded, BadTopKInConfigNamesTheFile) {
  MemoryEnv env;
  env.CreateDirs("/hf");
  const std::string empty_safetensors = std::string("\x02\0\0\0\0\0\0\0{}", 10);
  WriteFileAtomic(&env, "/hf/model.safetensors", empty_safetensors);
  GptExportSpec spec = Spec();
  spec.experts = 2;
  for (const char* topk : {"\"x\"", "0", "3", "1.5"}) {
    WriteFileAtomic(&env, "/hf/config.json",
                    std::string("{\"num_experts_per_tok\": ") + topk + "}");
    EXPECT_THAT([&] { WriteHfUnsharded(&env, spec, "/hf", "/out"); },
                ThrowsError(ErrorKind::kCorruption, "/hf/config.json: num_experts_per_tok"))
        << topk;
  }
}

}  // namespace
}  // namespace distckpt
