// CarryVerlMegatronFiles on a MemoryEnv: what a reshard of verl's Megatron
// step carries beside the new dist_ckpt/, with no local filesystem.
#include "interop/verl_megatron_carry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/memory_env.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;

void Put(Env* env, const std::string& path, const std::string& text) {
  env->CreateDirs(DirName(path));
  WriteFileAtomic(env, path, text);
}

TEST(VerlMegatronCarry, CopiesSideFilesAndRewritesTheParallelSizes) {
  MemoryEnv env;
  Put(&env, "/in/global_step_2/actor/dist_ckpt/.metadata", "old");
  Put(&env, "/in/global_step_2/actor/huggingface/config.json", "{\"a\": 1}");
  Put(&env, "/in/global_step_2/actor/transformer_config.json",
      R"({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
                      "hidden_size": 16})");
  Put(&env, "/in/global_step_2/data.pt", "dataloader");
  Put(&env, "/in/global_step_2/critic/transformer_config.json", "{}");
  Put(&env, "/out/actor/dist_ckpt/.metadata", "new");
  Put(&env, "/out/actor/dist_ckpt.lock", "");
  const std::vector<std::string> notes = CarryVerlMegatronFiles(
      &env, {"/in/global_step_2/actor", "/out/actor", "/in/global_step_2", "/out"}, 1, 2);
  EXPECT_THAT(notes, ElementsAre("not carried: verl component critic (reshard carries actor)"));
  EXPECT_EQ(ReadFileToString(&env, "/out/actor/dist_ckpt/.metadata"), "new");
  EXPECT_FALSE(env.FileExists("/out/actor/dist_ckpt.lock"));
  EXPECT_EQ(ReadFileToString(&env, "/out/actor/huggingface/config.json"), "{\"a\": 1}");
  EXPECT_EQ(ReadFileToString(&env, "/out/data.pt"), "dataloader");
  EXPECT_FALSE(env.IsDirectory("/out/critic"));
  const nlohmann::json tc =
      nlohmann::json::parse(ReadFileToString(&env, "/out/actor/transformer_config.json"));
  EXPECT_EQ(tc["tensor_model_parallel_size"], 1);
  EXPECT_EQ(tc["pipeline_model_parallel_size"], 2);
  EXPECT_EQ(tc["hidden_size"], 16);
}

}  // namespace
}  // namespace distckpt
