// verl's Megatron checkpoints (format/verl/verl_megatron.h) as the manager's
// catalog and the CLI's path resolution see them, on a MemoryEnv: a
// component is complete when dist_ckpt/metadata.json names a backend;
// TrackedIterationDir finds verl's global_step_N; the args come from
// transformer_config.json and huggingface/config.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "format/verl/verl_megatron.h"
#include "io/memory_env.h"
#include "manager/catalog.h"

namespace distckpt {
namespace {

using ::testing::HasSubstr;

constexpr char kRoot[] = "/verl-megatron-root";
constexpr char kConfig[] = R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
 "common_backend": "torch", "common_backend_version": 1})";

// ROOT/global_step_N/actor/{dist_ckpt/{.metadata,metadata.json},transformer_config.json,
// huggingface/config.json}, ROOT/global_step_N/data.pt; `finished` false: no metadata.json.
void WriteStep(Env* env, int step, bool finished = true) {
  const std::string actor = std::string(kRoot) + "/global_step_" + std::to_string(step) + "/actor";
  env->CreateDirs(actor + "/dist_ckpt");
  env->CreateDirs(actor + "/huggingface");
  WriteFileAtomic(env, actor + "/dist_ckpt/.metadata", std::string("x"));
  if (finished) WriteFileAtomic(env, actor + "/dist_ckpt/metadata.json", std::string(kConfig));
  WriteFileAtomic(env, actor + "/transformer_config.json",
                  std::string(R"({"num_attention_heads": 4, "num_query_groups": 2,
                    "num_layers": 2, "hidden_size": 16, "ffn_hidden_size": 24,
                    "gated_linear_unit": true, "kv_channels": 4, "params_dtype": "torch.bfloat16"})"));
  WriteFileAtomic(env, actor + "/huggingface/config.json", std::string(R"({"vocab_size": 64})"));
  WriteFileAtomic(env, std::string(kRoot) + "/global_step_" + std::to_string(step) + "/data.pt",
                  std::string("d"));
}

TEST(VerlMegatron, ResolvesRootStepAndComponent) {
  MemoryEnv env;
  WriteStep(&env, 1);
  WriteFileAtomic(&env, std::string(kRoot) + "/latest_checkpointed_iteration.txt",
                  std::string("1"));
  const std::string step = std::string(kRoot) + "/global_step_1";
  EXPECT_EQ(TrackedIterationDir(&env, kRoot), step);
  std::string component;
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step, &component), step + "/actor/dist_ckpt");
  EXPECT_EQ(component, step + "/actor");
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step + "/actor"), step + "/actor/dist_ckpt");
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step + "/actor/dist_ckpt"), std::nullopt);
  EXPECT_EQ(VerlMegatronDistCkpt(&env, kRoot), std::nullopt);
}

TEST(VerlMegatron, ArgsFromTransformerConfig) {
  MemoryEnv env;
  WriteStep(&env, 1);
  const std::string dist = std::string(kRoot) + "/global_step_1/actor/dist_ckpt";
  std::optional<nlohmann::json> args = VerlMegatronArgs(&env, dist);
  ASSERT_TRUE(args.has_value());
  EXPECT_EQ((*args)["num_attention_heads"], 4);
  EXPECT_EQ((*args)["num_query_groups"], 2);
  EXPECT_EQ((*args)["group_query_attention"], true);
  EXPECT_EQ((*args)["swiglu"], true);
  EXPECT_EQ((*args)["vocab_size"], 64);
  EXPECT_EQ((*args)["make_vocab_size_divisible_by"], 1);
  EXPECT_FALSE(args->contains("params_dtype"));
  // Megatron's own args win.
  CheckpointMetadata md;
  md.common = {{"args", {{"num_attention_heads", 8}}}};
  AddVerlMegatronArgs(&env, dist, md);
  EXPECT_EQ(md.common["args"]["num_attention_heads"], 8);
  CheckpointMetadata bare;
  AddVerlMegatronArgs(&env, dist, bare);
  EXPECT_EQ(bare.common["args"]["num_attention_heads"], 4);
  // Not beside a dist_ckpt folder, or no transformer_config.json: nothing.
  EXPECT_EQ(VerlMegatronArgs(&env, std::string(kRoot) + "/global_step_1/actor"), std::nullopt);
  WriteFileAtomic(&env, std::string(kRoot) + "/global_step_1/actor/transformer_config.json",
                  std::string("[1"));
  EXPECT_THAT([&] { VerlMegatronArgs(&env, dist); },
              ThrowsError(ErrorKind::kCorruption, "transformer_config.json"));
}

TEST(VerlMegatron, CatalogCompleteWhenMetadataJsonIsWritten) {
  MemoryEnv env;
  WriteStep(&env, 1);
  WriteStep(&env, 2, /*finished=*/false);
  Catalog catalog = ScanRoot(&env, kRoot, CheckpointLayout::kVerl);
  ASSERT_EQ(catalog.entries.size(), 2u);
  EXPECT_TRUE(catalog.entries[0].complete);
  EXPECT_TRUE(catalog.entries[0].foreign);
  EXPECT_EQ(catalog.entries[0].format, "verl-megatron");
  ASSERT_TRUE(catalog.entries[0].manifest.has_value());
  EXPECT_EQ(catalog.entries[0].manifest->components, std::vector<std::string>{"actor"});
  EXPECT_FALSE(catalog.entries[1].complete);
  EXPECT_THAT(catalog.entries[1].why_incomplete,
              HasSubstr("verl component 'actor': dist_ckpt/metadata.json"));
}

// `reshard --format native` of a verl root: dist_ckpt/metadata.json is
// distckpt's native metadata, not Megatron's; the component still resolves,
// and a metadata.json of another format (or none) does not.
TEST(VerlMegatron, NativeDistCkptIsAComponent) {
  MemoryEnv env;
  WriteStep(&env, 1, /*finished=*/false);
  const std::string step = std::string(kRoot) + "/global_step_1";
  const std::string dist = step + "/actor/dist_ckpt";
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step), std::nullopt);
  WriteFileAtomic(&env, dist + "/metadata.json", std::string(R"({"format": "zarr"})"));
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step), std::nullopt);
  WriteFileAtomic(&env, dist + "/metadata.json",
                  std::string(R"({"format": "native", "format_version": 5, "tensors": []})"));
  EXPECT_EQ(VerlMegatronDistCkpt(&env, step), dist);
  Catalog catalog = ScanRoot(&env, kRoot, CheckpointLayout::kVerl);
  ASSERT_EQ(catalog.entries.size(), 1u);
  EXPECT_TRUE(catalog.entries[0].complete) << catalog.entries[0].why_incomplete;
  EXPECT_EQ(catalog.entries[0].format, "verl-megatron");
}

TEST(VerlMegatron, LayoutDetectedFromTheStepFolders) {
  MemoryEnv env;
  std::string why;
  EXPECT_EQ(DetectCheckpointLayout(&env, kRoot, &why), CheckpointLayout::kMegatron);  // empty
  WriteStep(&env, 1);
  EXPECT_EQ(DetectCheckpointLayout(&env, kRoot, &why), CheckpointLayout::kVerl);
  EXPECT_EQ(why, "1 global_step_N folders, no iter_N");
  ASSERT_NO_THROW(env.CreateDirs(std::string(kRoot) + "/iter_0000001"));
  EXPECT_EQ(DetectCheckpointLayout(&env, kRoot, &why), CheckpointLayout::kMegatron);
  EXPECT_EQ(why, "1 iter_N folders beside 1 global_step_N");
}
}  // namespace
}  // namespace distckpt
