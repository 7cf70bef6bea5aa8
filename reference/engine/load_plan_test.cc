#include "engine/load_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/chunk_index.h"
#include "io/testing.h"

namespace distckpt {
namespace {

StoredTensor RowChunks(Shape global, int64_t parts) {
  StoredTensor t;
  t.key = "w";
  t.dtype = DType::kF32;
  t.global_shape = global;
  int64_t rows = global[0] / parts;
  for (int64_t p = 0; p < parts; ++p) {
    StoredChunk c;
    c.box = Box{{p * rows, 0}, {rows, global[1]}};
    c.length = static_cast<uint64_t>(c.box.volume()) * 4;
    t.chunks.push_back(c);
  }
  return t;
}

ShardedTensor Request(Shape global, Box box) {
  ShardedTensor r;
  r.key = "w";
  r.dtype = DType::kF32;
  r.global_shape = global;
  r.global_offset = box.offset;
  r.local_shape = box.shape;
  return r;
}

TEST(LoadPlanTest, SameLayoutIsOneWholeRun) {
  StoredTensor stored = RowChunks({6, 4}, 2);
  TensorPlan plan = PlanTensorLoad(stored, Request({6, 4}, Box{{3, 0}, {3, 4}}));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].chunk_index, 1u);
  ASSERT_EQ(plan.chunks[0].runs.size(), 1u);
  EXPECT_EQ(plan.chunks[0].runs[0], (CopyRun{0, 0, 12}));
  EXPECT_EQ(plan.elements_needed, 12);
  EXPECT_EQ(plan.elements_covered, 12);
}

TEST(LoadPlanTest, ColumnSplitReadsOnlyNeededColumns) {
  // Stored row-split, requested column-split: one run per row of each chunk.
  StoredTensor stored = RowChunks({6, 4}, 2);
  TensorPlan plan = PlanTensorLoad(stored, Request({6, 4}, Box{{0, 1}, {6, 2}}));
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].runs.size(), 3u);
  EXPECT_EQ(plan.chunks[0].runs[1], (CopyRun{5, 2, 2}));  // row 1, cols 1-2 -> dst row 1
  EXPECT_EQ(plan.chunks[1].runs[0], (CopyRun{1, 6, 2}));  // row 3 -> dst row 3
  EXPECT_EQ(plan.elements_covered, 12);
}

TEST(LoadPlanTest, FlattenedRequestAndChunk) {
  StoredTensor stored = RowChunks({4, 3}, 1);
  stored.chunks[0].flat = FlatRange{0, 7};  // first 7 elements ...
  StoredChunk second = stored.chunks[0];
  second.flat = FlatRange{7, 12};  // ... and the other 5 stored separately
  stored.chunks.push_back(second);
  ShardedTensor request = Request({4, 3}, Box{{0, 0}, {4, 3}});
  request.flattened_range = FlatRange{5, 9};
  TensorPlan plan = PlanTensorLoad(stored, request);
  EXPECT_EQ(plan.elements_needed, 4);
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].runs, (std::vector<CopyRun>{{5, 0, 2}}));
  EXPECT_EQ(plan.chunks[1].runs, (std::vector<CopyRun>{{0, 2, 2}}));
}

TEST(LoadPlanTest, GlobalShapeMismatchNamesBothShapes) {
  StoredTensor stored = RowChunks({6, 4}, 2);
  EXPECT_THAT(
      [&] {
        PlanTensorLoad(stored, Request({8, 4}, Box{{0, 0}, {8, 4}}));
      },
      ThrowsError(ErrorKind::kShapeMismatch,
                  "Global shape mismatch for loaded ((6, 4)) and expected ((8, 4)) tensor "
                  "for key w"));
}

TEST(LoadPlanTest, ShapeMismatchAllowedReadsOnlyTheOverlap) {
  StoredTensor stored = RowChunks({6, 4}, 2);
  ShardedTensor request = Request({8, 4}, Box{{4, 0}, {4, 4}});
  request.allow_shape_mismatch = true;
  TensorPlan plan = PlanTensorLoad(stored, request);
  EXPECT_EQ(plan.elements_needed, 8);  // rows 4-5; rows 6-7 stay zero
  EXPECT_EQ(plan.elements_covered, 8);
}

TEST(LoadPlanTest, MissingChunkIsIncomplete) {
  StoredTensor stored = RowChunks({6, 4}, 2);
  stored.chunks.pop_back();
  EXPECT_THAT(
      [&] {
        PlanTensorLoad(stored, Request({6, 4}, Box{{2, 0}, {2, 4}}));
      },
      ThrowsError(ErrorKind::kIncomplete, "key 'w': 4 of 8 requested elements"));
}

TEST(LoadPlanTest, OverlappingStoredChunksAreCorruption) {
  StoredTensor stored = RowChunks({6, 4}, 2);
  stored.chunks.push_back(stored.chunks[0]);
  EXPECT_THAT(
      [&] {
        PlanTensorLoad(stored, Request({6, 4}, Box{{0, 0}, {6, 4}}));
      },
      ThrowsError(ErrorKind::kCorruption, "stored chunks of key 'w' overlap"));
}

// A single stored chunk that is exactly the request takes a short path
// (PlanTensorLoad without an index); it must give the general path's plan
// (taken with an index), including the edges: an empty box, a chunk past the
// stored shape under allow_shape_mismatch, a flat chunk, a partial request.
TEST(LoadPlanTest, OneWholeChunkShortPathEqualsGeneralPath) {
  struct Case {
    Shape global;
    Box chunk;
    Box request;
    std::optional<FlatRange> flat;
    bool allow_mismatch;
  };
  const std::vector<Case> cases = {
      {{6, 4}, Box{{0, 0}, {6, 4}}, Box{{0, 0}, {6, 4}}, std::nullopt, false},
      {{5}, Box{{0}, {5}}, Box{{0}, {5}}, std::nullopt, false},
      {{2, 3, 4}, Box{{0, 0, 0}, {2, 3, 4}}, Box{{0, 0, 0}, {2, 3, 4}}, std::nullopt, false},
      {{6, 4}, Box{{0, 0}, {0, 4}}, Box{{0, 0}, {0, 4}}, std::nullopt, false},
      {{6, 4}, Box{{0, 0}, {6, 4}}, Box{{0, 0}, {6, 4}}, FlatRange{0, 24}, false},
      {{6, 4}, Box{{0, 0}, {6, 4}}, Box{{0, 0}, {3, 4}}, std::nullopt, false},
      {{6, 4}, Box{{0, 0}, {8, 4}}, Box{{0, 0}, {8, 4}}, std::nullopt, true},
  };
  for (const Case& c : cases) {
    StoredTensor stored;
    stored.key = "w";
    stored.dtype = DType::kF32;
    stored.global_shape = c.global;
    StoredChunk chunk;
    chunk.box = c.chunk;
    chunk.flat = c.flat;
    chunk.length = static_cast<uint64_t>(c.chunk.volume()) * 4;
    stored.chunks.push_back(chunk);
    ShardedTensor request = Request(c.allow_mismatch ? c.request.shape : c.global, c.request);
    request.allow_shape_mismatch = c.allow_mismatch;
    const ChunkIndex index(stored);
    auto plan = [&](const ChunkIndex* i) {
      try {
        return std::optional(PlanTensorLoad(stored, request, i));
      } catch (const CheckpointError&) {
        return std::optional<TensorPlan>();
      }
    };
    const std::optional<TensorPlan> short_path = plan(nullptr), general = plan(&index);
    SCOPED_TRACE(c.request.ToString());
    ASSERT_EQ(short_path.has_value(), general.has_value());
    if (short_path) {
      EXPECT_EQ(*short_path, *general);
    }
  }
  // The short path's plan itself: one run of every element.
  const TensorPlan whole =
      PlanTensorLoad(RowChunks({6, 4}, 1), Request({6, 4}, Box{{0, 0}, {6, 4}}));
  ASSERT_EQ(whole.chunks.size(), 1u);
  EXPECT_EQ(whole.chunks[0].runs, (std::vector<CopyRun>{{0, 0, 24}}));
  EXPECT_EQ(whole.elements_needed, 24);
  EXPECT_EQ(whole.elements_covered, 24);
}

}  // namespace
}  // namespace distckpt
