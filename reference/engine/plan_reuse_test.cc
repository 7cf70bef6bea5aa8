// Plan and metadata reuse (SaveOptions::strategy.cache; Megatron's
// test_global_metadata_reuse / TestCachedMetadata, docs/megatron-semantics.md §9.2 rows 20-21, 77):
// counted collectives show what a reused plan skips, a layout change on any
// rank is planned afresh, and every checkpoint loads back right.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "engine/checkpoint_diff.h"
#include "engine/load.h"
#include "engine/save.h"
#include "engine/save_async.h"
#include "io/testing.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

// "w" (8, 6) split along `axis` over the ranks, value = 100 * step + index;
// "b" (6,) replicated; one object per rank, rank 1's growing with `step`
// (so its written layout changes while the plan stays).
Node State(const Communicator& comm, int step, int axis = 0) {
  Shape local{8, 6};
  local[axis] /= comm.size();
  Tensor w = Tensor::Empty(DType::kF32, local);
  for (int64_t i = 0; i < local[0]; ++i) {
    for (int64_t j = 0; j < local[1]; ++j) {
      int64_t gi = axis == 0 ? i + comm.rank() * local[0] : i,
              gj = axis == 1 ? j + comm.rank() * local[1] : j;
      w.data_as<float>()[i * local[1] + j] = static_cast<float>(100 * step + gi * 6 + gj);
    }
  }
  Dict d{{"w", Node(ShardedTensor::FromRankOffsets("w", w, {{axis, comm.rank(), comm.size()}}))},
         {"b", Node(ShardedTensor::FromRankOffsets("b", Tensor::Zeros(DType::kF32, {6}), {},
                                                   {comm.rank()}))},
         {"obj", Node(ShardedObject{"obj",
                                    comm.rank() == 1 ? std::string(std::max(step, 0), 'x') : "same",
                                    {comm.size()},
                                    {comm.rank()},
                                    {0}})},
         {"step", Node(nlohmann::json(step))}};
  return Node(std::move(d));
}

// Element `index` of this rank's "w" in the checkpoint saved at `step`.
float LoadedW(const std::string& dir, Communicator& comm, int index, int step) {
  LoadResult r = Load(State(comm, -1), dir, comm);
  if (comm.rank() == 1) {
    EXPECT_EQ(r.state_dict.at("obj").as<nlohmann::json>().get<std::string>(),
              std::string(step, 'x'))
        << dir;
  }
  return static_cast<float>(r.state_dict.at("w").as<Tensor>().At(index));
}

TEST(PlanReuseTest, CountedCollectivesShowTheReusedPlan) {
  ScopedTempDir tmp;
  for (bool fully_parallel : {false, true}) {
    RunRanks(4, [&](Communicator& comm) {
      CountingCommunicator counting(comm);
      PlanCache cache;
      SaveOptions options;
      options.strategy.cache = &cache;
      if (fully_parallel) options.strategy.kind = SaveStrategy::Kind::kFullyParallel;
      std::vector<std::map<std::string, int>> calls;
      std::vector<uint64_t> bytes;
      for (int step = 0; step < 3; ++step) {
        counting.Reset();
        Save(State(comm, step),
             tmp.path() + "/" + std::to_string(fully_parallel) + std::to_string(step), counting,
             options);
        calls.push_back(counting.calls);
        bytes.push_back(counting.bytes_moved);
      }
      EXPECT_EQ(cache.hits, 2u);
      // Save 1 plans: validation gather, common-state broadcast (and the
      // distribution all-gather); saves 2 and 3 only check the fingerprint.
      EXPECT_EQ(calls[0]["Gather"], 2);
      EXPECT_EQ(calls[0]["Broadcast"], 2);
      for (int step : {1, 2}) {
        EXPECT_EQ(calls[step]["Gather"], 1) << step;
        EXPECT_EQ(calls[step]["Broadcast"], 1) << step;
        EXPECT_EQ(calls[step]["AllReduce"], 1) << step;
        EXPECT_EQ(calls[step]["AllGather"], calls[0]["AllGather"] - (fully_parallel ? 2 : 1))
            << step;
      }
      if (comm.rank() != 0) {  // rank 0 gathers; it sends nothing for its own metadata
        // A reused plan sends each chunk's block checksums (format v2: up to 64
        // per chunk) instead of its whole metadata: less, though for these tiny
        // chunks no longer half.
        EXPECT_LT(bytes[1], bytes[0]) << "ranks send checksums instead of metadata";
      }
      for (int step = 0; step < 3; ++step) {
        EXPECT_EQ(LoadedW(tmp.path() + "/" + std::to_string(fully_parallel) + std::to_string(step),
                          comm, 5, step),
                  100 * step + comm.rank() * 12 + 5);
      }
    });
  }
}

TEST(PlanReuseTest, ALayoutChangeOnOneRankIsPlannedAfreshOnEveryRank) {
  ScopedTempDir tmp;
  auto errors = ErrorMessagesOnRanks(4, [&](Communicator& comm) {
    PlanCache cache;
    SaveOptions options;
    options.strategy.cache = &cache;
    Save(State(comm, 0), tmp.path() + "/a", comm, options);
    Node broken = State(comm, 1);
    if (comm.rank() == 2) {  // rank 2 now claims rank 3's rows: validation must see it
      broken["w"].as<ShardedTensor>().global_offset = {6, 0};
    }
    Save(broken, tmp.path() + "/b", comm, options);
  });
  EXPECT_THAT(errors, Each(HasSubstr("Invalid access pattern for ShardedTensor(key='w'")));
}

TEST(PlanReuseTest, AConsistentLayoutChangeIsSavedRight) {
  for (SaveStrategy::Kind kind : {SaveStrategy::Kind::kPlain, SaveStrategy::Kind::kFullyParallel}) {
    ScopedTempDir tmp;
    RunRanks(2, [&](Communicator& comm) {
      PlanCache cache;
      SaveOptions options;
      options.strategy.kind = kind;
      options.strategy.cache = &cache;
      Save(State(comm, 0, 0), tmp.path() + "/rows", comm, options);
      Save(State(comm, 0, 1), tmp.path() + "/cols", comm, options);
      EXPECT_EQ(cache.hits, 0u);
    });
    EXPECT_TRUE(DiffCheckpoints(tmp.path() + "/rows", tmp.path() + "/cols").identical());
  }
}

TEST(PlanReuseTest, AsyncSavesReuseThePlanToo) {
  ScopedTempDir tmp;
  RunRanks(4, [&](Communicator& comm) {
    PlanCache cache;
    SaveOptions options;
    options.strategy.cache = &cache;
    options.strategy.writers = 2;
    AsyncCallsQueue queue(comm);
    for (int step = 0; step < 3; ++step) {
      AsyncSave save =
          SaveAsync(State(comm, step), tmp.path() + "/" + std::to_string(step), comm, options);
      queue.Schedule(save.request);
      queue.MaybeFinalize(true);
    }
    EXPECT_EQ(cache.hits, 2u);
    EXPECT_EQ(LoadedW(tmp.path() + "/2", comm, 0, 2), 200 + comm.rank() * 12);
  });
}

}  // namespace
}  // namespace distckpt
