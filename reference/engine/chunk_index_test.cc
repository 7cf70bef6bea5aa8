#include "engine/chunk_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "engine/load_plan.h"

namespace distckpt {
namespace {

int64_t Uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A global shape of rank 0-4 with room for a few thousand chunks.
Shape RandomShape(std::mt19937& rng) {
  static constexpr int64_t kMaxExtent[] = {0, 20000, 150, 32, 12};
  Shape shape(rng() % 5);
  for (int64_t& extent : shape) extent = Uniform(rng, 1, kMaxExtent[shape.size()]);
  return shape;
}

// Cut points 0 = c0 < c1 < ... < ck = extent, k <= parts.
std::vector<int64_t> Cuts(std::mt19937& rng, int64_t extent, int64_t parts) {
  std::vector<int64_t> cuts{0, extent};
  for (int64_t i = 1; i < std::min(parts, extent); ++i) cuts.push_back(Uniform(rng, 1, extent - 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// Disjoint boxes covering `global`, about `target` of them: an uneven grid
// (as TP / PP / EP split a tensor) or repeated cuts of random boxes along
// random axes (an irregular partition).
std::vector<Box> RandomPartition(std::mt19937& rng, const Shape& global, size_t target) {
  std::vector<Box> boxes{Box{Shape(global.size(), 0), global}};
  if (global.empty()) return boxes;
  if (rng() % 2 == 0) {
    std::vector<std::vector<int64_t>> cuts;
    size_t cells = 1;
    for (int64_t extent : global) {
      const int64_t parts = std::max<int64_t>(
          1, static_cast<int64_t>(std::pow(double(target), 1.0 / global.size()) * 1.5 *
                                  std::uniform_real_distribution<double>(0, 1)(rng)));
      cuts.push_back(Cuts(rng, extent, parts));
      cells *= cuts.back().size() - 1;
    }
    boxes.clear();
    for (size_t cell = 0; cell < cells; ++cell) {
      Box box{Shape(global.size()), Shape(global.size())};
      size_t rest = cell;
      for (size_t a = global.size(); a-- > 0;) {
        const size_t i = rest % (cuts[a].size() - 1);
        rest /= cuts[a].size() - 1;
        box.offset[a] = cuts[a][i];
        box.shape[a] = cuts[a][i + 1] - cuts[a][i];
      }
      boxes.push_back(box);
    }
    return boxes;
  }
  for (int tries = 0; boxes.size() < target && tries < 20 * static_cast<int>(target); ++tries) {
    Box& box = boxes[rng() % boxes.size()];
    const size_t axis = rng() % global.size();
    if (box.shape[axis] < 2) continue;
    const int64_t cut = Uniform(rng, 1, box.shape[axis] - 1);
    Box second = box;
    second.offset[axis] += cut;
    second.shape[axis] -= cut;
    box.shape[axis] = cut;
    boxes.push_back(second);
  }
  return boxes;
}

StoredChunk Chunk(Box box) {
  StoredChunk chunk;
  chunk.box = std::move(box);
  return chunk;
}

struct Tally {
  int many_chunk_keys = 0;   // keys of at least 1,000 chunks
  int flat_keys = 0;         // keys with flat-range chunks
  int damaged_keys = 0;      // keys with a dropped, doubled or malformed chunk
  int partial_overlaps = 0;  // planned chunks of which only part is requested
  int wide_plans = 0;        // plans of at least 10 chunks
  int flat_requests = 0;
  int errors = 0;
};

// A stored tensor over a random partition of a random shape: some chunks
// split further into flat ranges (as the distributed optimizer stores
// them), some keys damaged, chunks in random order.
StoredTensor RandomStored(std::mt19937& rng, Tally& tally) {
  StoredTensor stored;
  stored.key = "w";
  stored.global_shape = RandomShape(rng);
  static constexpr size_t kTargets[] = {4, 60, 2500};
  const size_t target = kTargets[rng() % 3] * Uniform(rng, 1, 4) / 2 + 1;
  const bool flat = rng() % 3 == 0;
  for (const Box& box : RandomPartition(rng, stored.global_shape, target)) {
    std::vector<int64_t> cuts{0, box.volume()};
    if (flat && rng() % 2 == 0) cuts = Cuts(rng, box.volume(), Uniform(rng, 2, 4));
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      StoredChunk chunk = Chunk(box);
      if (cuts.size() > 2) chunk.flat = FlatRange{cuts[i], cuts[i + 1]};
      stored.chunks.push_back(chunk);
    }
  }
  tally.many_chunk_keys += stored.chunks.size() >= 1000;
  tally.flat_keys += flat;
  if (rng() % 5 == 0) {
    ++tally.damaged_keys;
    std::vector<StoredChunk>& chunks = stored.chunks;
    StoredChunk& some = chunks[rng() % chunks.size()];
    switch (rng() % 5) {
      case 0:
        chunks.erase(chunks.begin() + static_cast<int64_t>(rng() % chunks.size()));
        break;
      case 1:
        chunks.push_back(some);
        break;
      case 2:  // another rank
        chunks.push_back(Chunk(Box{Shape(some.box.rank() + 1, 0), Shape(some.box.rank() + 1, 1)}));
        break;
      case 3:  // empty box
        chunks.push_back(Chunk(Box{some.box.offset, Shape(some.box.rank(), 0)}));
        break;
      case 4:  // flat range outside its box
        some.flat = FlatRange{0, some.box.volume() + 1};
        break;
    }
  }
  std::shuffle(stored.chunks.begin(), stored.chunks.end(), rng);
  return stored;
}

// A request for a random box of the stored shape (sometimes reaching past it
// under allow_shape_mismatch), sometimes only a flat range of it.
ShardedTensor RandomRequest(std::mt19937& rng, const StoredTensor& stored, Tally& tally) {
  ShardedTensor request;
  request.key = stored.key;
  request.global_shape = stored.global_shape;
  if (rng() % 6 == 0) {
    request.allow_shape_mismatch = true;
    for (int64_t& extent : request.global_shape) extent += Uniform(rng, 0, 3);
  }
  for (int64_t extent : request.global_shape) {
    const int64_t lo = Uniform(rng, 0, extent - 1);
    request.global_offset.push_back(rng() % 4 == 0 ? 0 : lo);
    request.local_shape.push_back(rng() % 4 == 0 ? extent - request.global_offset.back()
                                                 : Uniform(rng, 1, extent - lo));
  }
  if (rng() % 4 == 0) {
    ++tally.flat_requests;
    const int64_t volume = Volume(request.local_shape);
    const int64_t start = Uniform(rng, 0, volume - 1);
    request.flattened_range = FlatRange{start, Uniform(rng, start + 1, volume)};
  }
  return request;
}

struct Outcome {
  std::optional<TensorPlan> plan;
  std::optional<ErrorKind> kind;
  std::string error;
};

Outcome Plan(const StoredTensor& stored, const ShardedTensor& request, const ChunkIndex* index) {
  try {
    return {PlanTensorLoad(stored, request, index), std::nullopt, ""};
  } catch (const CheckpointError& e) {
    return {std::nullopt, e.kind(), e.what()};
  }
}

TEST(ChunkIndexTest, PlansAsTheScanOfAllChunksDoes) {
  std::mt19937 rng(20261126);
  Tally tally;
  for (int key = 0; key < 300; ++key) {
    const StoredTensor stored = RandomStored(rng, tally);
    const ChunkIndex index(stored);
    for (int r = 0; r < 8; ++r) {
      const ShardedTensor request = RandomRequest(rng, stored, tally);
      const Outcome scan = Plan(stored, request, nullptr);
      const Outcome indexed = Plan(stored, request, &index);
      ASSERT_EQ(indexed.error, scan.error) << "request " << request.GlobalBox().ToString();
      ASSERT_EQ(indexed.kind, scan.kind);
      ASSERT_EQ(indexed.plan, scan.plan) << "key " << key << " of " << stored.chunks.size()
                                         << " chunks, request " << request.GlobalBox().ToString();
      if (!scan.plan) {
        ++tally.errors;
        continue;
      }
      tally.wide_plans += scan.plan->chunks.size() >= 10;
      for (const ChunkPlan& c : scan.plan->chunks) {
        tally.partial_overlaps += c.elements < stored.chunks[c.chunk_index].numel();
      }
    }
  }
  // The cases cover what the index must get right (seen: 43 keys of >= 1,000 chunks,
  // 95 flat, 68 damaged; 7,490 partial overlaps, 590 wide plans, 581 flat requests,
  // 262 errors).
  EXPECT_GE(tally.many_chunk_keys, 30);
  EXPECT_GE(tally.flat_keys, 50);
  EXPECT_GE(tally.damaged_keys, 30);
  EXPECT_GE(tally.partial_overlaps, 2000);
  EXPECT_GE(tally.wide_plans, 200);
  EXPECT_GE(tally.flat_requests, 300);
  EXPECT_GE(tally.errors, 50);
}

TEST(ChunkIndexTest, OverlappingIsExactlyTheIntersectingChunks) {
  std::mt19937 rng(7);
  Tally tally;
  int hits = 0, queries = 0;
  for (int key = 0; key < 200; ++key) {
    const StoredTensor stored = RandomStored(rng, tally);
    const ChunkIndex index(stored);
    const size_t rank = stored.global_shape.size();
    for (int q = 0; q < 10; ++q) {
      // Any box, also empty or partly outside the shape.
      Box box{Shape(rank), Shape(rank)};
      for (size_t a = 0; a < rank; ++a) {
        box.offset[a] = Uniform(rng, -2, stored.global_shape[a]);
        box.shape[a] = Uniform(rng, 0, stored.global_shape[a] / 2 + 2);
      }
      std::vector<size_t> expected;
      for (size_t i = 0; i < stored.chunks.size(); ++i) {
        const Box& chunk = stored.chunks[i].box;
        if (chunk.rank() != rank || chunk.offset.size() != rank || Intersect(chunk, box)) {
          expected.push_back(i);
        }
      }
      ASSERT_EQ(index.Overlapping(box), expected) << box.ToString();
      hits += static_cast<int>(expected.size());
      ++queries;
    }
  }
  EXPECT_GE(hits, 5 * queries);  // not mostly empty answers
}

TEST(ChunkIndexTest, QueryOfAnotherRankIsInvalid) {
  StoredTensor stored;
  stored.global_shape = {4, 4};
  stored.chunks.push_back(Chunk(Box{{0, 0}, {4, 4}}));
  EXPECT_THROW(ChunkIndex(stored).Overlapping(Box{{0}, {4}}), CheckpointError);
}

}  // namespace
}  // namespace distckpt
