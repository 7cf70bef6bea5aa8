// DiffCheckpoints: same state under different layouts is identical; changed
// elements, dtypes, shapes, keys, objects and common state are reported.
#include "engine/checkpoint_diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "comm/thread_world.h"
#include "engine/save.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Variant {
  float changed_value = 4;  // element 4 of "w"
  DType bias_dtype = DType::kF32;
  bool extra_key = false;
  int object_value = 1;
  int step = 3;
};

// "w" (6, 4) = linear index split over the ranks along `axis`, "bias" (4,)
// replicated, an object and a common value.
void SaveVariant(const std::string& dir, int world, int axis, const Variant& v) {
  RunRanks(world, [&](Communicator& comm) {
    Shape local{6, 4};
    local[axis] /= world;
    Tensor w = Tensor::Empty(DType::kF32, local);
    for (int64_t i = 0; i < local[0]; ++i) {
      for (int64_t j = 0; j < local[1]; ++j) {
        int64_t gi = axis == 0 ? i + comm.rank() * local[0] : i;
        int64_t gj = axis == 1 ? j + comm.rank() * local[1] : j;
        int64_t index = gi * 4 + gj;
        w.data_as<float>()[i * local[1] + j] =
            index == 4 ? v.changed_value : static_cast<float>(index);
      }
    }
    Tensor bias = Tensor::Zeros(v.bias_dtype, {4});
    Dict d{{"w", Node(ShardedTensor::FromRankOffsets("w", w, {{axis, comm.rank(), world}}))},
           {"bias", Node(ShardedTensor::FromRankOffsets("bias", bias, {}, {comm.rank()}))},
           {"obj", Node(ShardedObject{"obj", v.object_value, {1}, {0}, {comm.rank()}})},
           {"step", Node(nlohmann::json(v.step))}};
    if (v.extra_key)
      d["extra"] = Node(ShardedTensor::FromRankOffsets("extra", Tensor::Zeros(DType::kF32, {1}), {},
                                                       {comm.rank()}));
    Save(Node(std::move(d)), dir, comm);
  });
}

TEST(CheckpointDiffTest, SameStateUnderDifferentLayoutsIsIdentical) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/rows", 2, 0, {});
  SaveVariant(tmp.path() + "/cols", 4, 1, {});
  CheckpointDiff diff = DiffCheckpoints(tmp.path() + "/rows", tmp.path() + "/cols");
  EXPECT_TRUE(diff.identical()) << ::testing::PrintToString(diff.mismatches);
  EXPECT_EQ(diff.tensors_compared, 2u);
  EXPECT_EQ(diff.elements_compared, 28u);
  EXPECT_EQ(diff.objects_compared, 1u);
}

TEST(CheckpointDiffTest, ReportsEveryKindOfDifference) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/a", 2, 0, {});
  SaveVariant(tmp.path() + "/b", 3, 0,
              {.changed_value = 4.5f,
               .bias_dtype = DType::kBF16,
               .extra_key = true,
               .object_value = 2,
               .step = 4});
  CheckpointDiff diff = DiffCheckpoints(tmp.path() + "/a", tmp.path() + "/b");
  EXPECT_FALSE(diff.identical());
  EXPECT_TRUE(diff.only_a.empty());
  EXPECT_THAT(diff.only_b, ElementsAre("extra"));
  EXPECT_THAT(diff.mismatches, ElementsAre("bias: dtype f32 vs bf16",
                                           "w: 1 of 24 elements differ, first at index 4: 4 vs 4.5 "
                                           "(max abs error 0.5, max rel error 0.1111111111111111)",
                                           "obj/shard_0_1: 1 vs 2", HasSubstr("common state")));
}

TEST(CheckpointDiffTest, GivesAVerdictPerKey) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/a", 2, 0, {});
  SaveVariant(tmp.path() + "/b", 2, 1, {.changed_value = 2.0f, .extra_key = true});
  CheckpointDiff diff = DiffCheckpoints(tmp.path() + "/a", tmp.path() + "/b");
  std::map<std::string, KeyDiff> by_key;
  for (const KeyDiff& k : diff.keys) by_key[k.key] = k;
  ASSERT_EQ(by_key.size(), 5u);  // bias, w, extra, obj/shard_0_1, common
  EXPECT_EQ(by_key["bias"].verdict, "identical");
  EXPECT_EQ(by_key["extra"].verdict, "only_b");
  EXPECT_EQ(by_key["obj/shard_0_1"].verdict, "identical");
  EXPECT_EQ(by_key["common"].verdict, "identical");
  const KeyDiff& w = by_key["w"];
  EXPECT_EQ(w.verdict, "differs");
  EXPECT_EQ(w.elements, 24);
  EXPECT_EQ(w.differing, 1);
  EXPECT_EQ(w.first_index, 4);
  EXPECT_DOUBLE_EQ(w.max_abs_error, 2.0);
  EXPECT_DOUBLE_EQ(w.max_rel_error, 1.0);  // |4 - 2| / |2|
}

TEST(CheckpointDiffTest, OnlyAndExcludeSelectKeysByGlob) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/a", 1, 0, {});
  SaveVariant(tmp.path() + "/b", 1, 0,
              {.changed_value = 4.5f, .extra_key = true, .object_value = 2, .step = 4});
  const std::string a = tmp.path() + "/a", b = tmp.path() + "/b";
  // Only the unchanged bias: identical, the other four keys left out.
  CheckpointDiff bias = DiffCheckpoints(a, b, {.only = {"bi*"}});
  EXPECT_TRUE(bias.identical());
  EXPECT_EQ(bias.tensors_compared, 1u);
  EXPECT_EQ(bias.keys_skipped, 4u);
  // Everything but what changed: objects by their key, the common state by "common".
  EXPECT_TRUE(DiffCheckpoints(a, b, {.exclude = {"w", "extra", "obj", "common"}}).identical());
  EXPECT_FALSE(DiffCheckpoints(a, b, {.exclude = {"w", "extra", "common"}}).identical());
  // Unique keys match too, and exclude wins over only.
  CheckpointDiff objects = DiffCheckpoints(a, b, {.only = {"obj/shard_*", "w"}, .exclude = {"w"}});
  EXPECT_THAT(objects.mismatches, ElementsAre("obj/shard_0_1: 1 vs 2"));
  EXPECT_EQ(objects.tensors_compared, 0u);
}

TEST(CheckpointDiffTest, ToleranceAcceptsSmallDifferences) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/a", 1, 0, {});
  SaveVariant(tmp.path() + "/b", 1, 0, {.changed_value = 4.001f});
  EXPECT_FALSE(DiffCheckpoints(tmp.path() + "/a", tmp.path() + "/b").identical());
  EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/a", tmp.path() + "/b", {.atol = 0.01}).identical());
  EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/a", tmp.path() + "/b", {.rtol = 0.001}).identical());
}

TEST(CheckpointDiffTest, AnUncommittedDirectoryIsRefused) {
  ScopedTempDir tmp;
  SaveVariant(tmp.path() + "/a", 1, 0, {});
  EXPECT_THAT([&] { DiffCheckpoints(tmp.path() + "/a", tmp.path()); },
              ThrowsError(ErrorKind::kIncomplete));
}

}  // namespace
}  // namespace distckpt
