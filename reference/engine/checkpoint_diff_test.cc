// DiffCheckpoints: same state under different layouts is identical; changed
// elements, dtypes, shapes, keys, objects and common state are reported.
#include "engine/checkpoint_diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
                                           "w: 1 of 24 elements differ, first at index 4: 4 vs 4.5",
                                           "obj/shard_0_1: 1 vs 2", HasSubstr("common state")));
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
