#include "format/checkpoint_metadata.h"

#include <gtest/gtest.h>

#include "io/testing.h"  // ThrowsError

namespace distckpt {
namespace {

StoredChunk Chunk(Shape offset, Shape shape, int rank) {
  StoredChunk chunk;
  chunk.box = {std::move(offset), std::move(shape)};
  chunk.file = "__" + std::to_string(rank) + "_0.bin";
  chunk.length = static_cast<uint64_t>(chunk.box.volume()) * 4;
  chunk.writer_rank = rank;
  return chunk;
}

CheckpointMetadata RankMetadata(int rank) {
  CheckpointMetadata md;
  md.writer = "distckpt test";
  StoredTensor& w = md.tensors["w"];
  w.key = "w";
  w.global_shape = {4, 2};
  w.chunks.push_back(Chunk({2 * rank, 0}, {2, 2}, rank));
  StoredObject& o = md.objects["rng/shard_" + std::to_string(rank) + "_2"];
  o.key = "rng";
  o.unique_key = "rng/shard_" + std::to_string(rank) + "_2";
  o.writer_rank = rank;
  return md;
}

TEST(CheckpointMetadataTest, MergeCollectsChunksAndObjects) {
  CheckpointMetadata merged;
  merged.topology = "tp=2";
  merged.MergeFrom(RankMetadata(0));
  CheckpointMetadata rank1 = RankMetadata(1);
  StoredTensor& bias = rank1.tensors["bias"];
  bias.key = "bias";
  bias.dtype = DType::kBF16;
  bias.global_shape = {2};
  rank1.common = {{"iteration", 7}};
  rank1.topology = "tp=4";
  merged.MergeFrom(rank1);

  EXPECT_EQ(merged.writer, "distckpt test");
  EXPECT_EQ(merged.topology, "tp=2");  // ours was set
  EXPECT_EQ(merged.common, nlohmann::json({{"iteration", 7}}));
  ASSERT_EQ(merged.tensors.size(), 2u);
  const StoredTensor& w = merged.tensors.at("w");
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[0].box.offset, (Shape{0, 0}));
  EXPECT_EQ(w.chunks[1].box.offset, (Shape{2, 0}));
  EXPECT_EQ(w.chunks[1].writer_rank, 1);
  EXPECT_EQ(merged.tensors.at("bias").dtype, DType::kBF16);
  EXPECT_EQ(merged.objects.size(), 2u);
  EXPECT_EQ(merged.Keys(), (std::vector<std::string>{"bias", "rng", "w"}));
}

TEST(CheckpointMetadataTest, MergeRejectsDisagreeingTensors) {
  CheckpointMetadata merged = RankMetadata(0);
  CheckpointMetadata other_shape = RankMetadata(1);
  other_shape.tensors["w"].global_shape = {4, 3};
  EXPECT_THAT([&] { merged.MergeFrom(other_shape); },
              ThrowsError(ErrorKind::kShapeMismatch,
                          "tensor 'w' was saved with dtype f32 and "
                          "global shape (4, 2) by one rank, dtype f32 "
                          "and global shape (4, 3) by another"));
  CheckpointMetadata other_dtype = RankMetadata(1);
  other_dtype.tensors["w"].dtype = DType::kF16;
  EXPECT_THAT([&] { merged.MergeFrom(other_dtype); },
              ThrowsError(ErrorKind::kShapeMismatch, "dtype f16"));
}

TEST(CheckpointMetadataTest, MergeRejectsAnObjectStoredTwice) {
  CheckpointMetadata merged = RankMetadata(0);
  CheckpointMetadata again = RankMetadata(0);
  again.objects.begin()->second.writer_rank = 3;
  again.tensors.clear();
  EXPECT_THAT([&] { merged.MergeFrom(again); },
              ThrowsError(ErrorKind::kInvalidSharding,
                          "object 'rng/shard_0_2' was stored twice, by rank 0 and rank 3"));
}

TEST(CheckpointMetadataTest, MergeKeepsEveryChunkAndCheckpointsStoreOneEmptyChunkPerOffset) {
  // [0] over dp=2 gives both ranks the empty shard at offset 0; [4, 0] over
  // tp=2 two empty shards at distinct offsets.
  auto rank_metadata = [](int rank) {
    CheckpointMetadata md;
    StoredTensor& e = md.tensors["e"];
    e.key = "e";
    e.global_shape = {0};
    e.chunks.push_back(Chunk({0}, {0}, rank));
    StoredTensor& rows = md.tensors["rows"];
    rows.key = "rows";
    rows.global_shape = {4, 0};
    rows.chunks.push_back(Chunk({2 * rank, 0}, {2, 0}, rank));
    return md;
  };
  CheckpointMetadata merged;
  merged.MergeFrom(rank_metadata(0));
  merged.MergeFrom(rank_metadata(1));
  EXPECT_EQ(merged.tensors.at("e").chunks.size(), 2u);  // both ranks' items exist in their files
  EXPECT_NO_THROW(CheckChunkTiling(merged, "m"));
  const CheckpointMetadata stored = WithoutDuplicateEmptyChunks(merged);
  ASSERT_EQ(stored.tensors.at("e").chunks.size(), 1u);
  EXPECT_EQ(stored.tensors.at("e").chunks[0].writer_rank, 0);
  EXPECT_EQ(stored.tensors.at("rows").chunks.size(), 2u);
  EXPECT_NO_THROW(CheckChunkTiling(stored, "m"));
}

StoredTensor Tiled(Shape global, std::vector<StoredChunk> chunks) {
  return StoredTensor{"w", DType::kF32, std::move(global), std::move(chunks)};
}

void CheckOne(const StoredTensor& tensor) {
  CheckpointMetadata md;
  md.tensors[tensor.key] = tensor;
  CheckChunkTiling(md, "ck/metadata.json");
}

StoredChunk Flat(StoredChunk chunk, int64_t start, int64_t stop) {
  chunk.flat = FlatRange{start, stop};
  chunk.length = static_cast<uint64_t>(stop - start) * 4;
  return chunk;
}

TEST(CheckChunkTilingTest, AcceptsExactTilings) {
  EXPECT_NO_THROW(CheckOne(Tiled({4, 2}, {Chunk({0, 0}, {4, 2}, 0)})));
  EXPECT_NO_THROW(CheckOne(Tiled({}, {Chunk({}, {}, 0)})));  // a scalar
  EXPECT_NO_THROW(CheckOne(Tiled({4, 2}, {Chunk({2, 0}, {2, 2}, 1), Chunk({0, 0}, {2, 2}, 0)})));
  // Flattened pieces of two chunks (distributed optimizer), and an empty trailing shard.
  EXPECT_NO_THROW(CheckOne(
      Tiled({4, 3}, {Flat(Chunk({0, 0}, {2, 3}, 0), 0, 4), Flat(Chunk({0, 0}, {2, 3}, 1), 4, 6),
                     Flat(Chunk({2, 0}, {2, 3}, 0), 0, 1), Flat(Chunk({2, 0}, {2, 3}, 1), 1, 6),
                     Chunk({4, 0}, {0, 3}, 2)})));
  // Tensors of no elements: any empty chunks, or none.
  EXPECT_NO_THROW(CheckOne(Tiled({4, 0}, {Chunk({0, 0}, {2, 0}, 0), Chunk({2, 0}, {2, 0}, 1)})));
  EXPECT_NO_THROW(CheckOne(Tiled({0}, {})));
}

TEST(CheckChunkTilingTest, OverlapNamesSourceKeyChunksAndRegion) {
  // metadata.json with one digit changed: chunk offset [0] -> [1] of 102 elements in two
  // chunks of 51 overlaps [51:52] and leaves [0:1] uncovered; counting elements passes it.
  EXPECT_THAT(
      [] {
        CheckOne(Tiled({102}, {Chunk({1}, {51}, 0), Chunk({51}, {51}, 2)}));
      },
      ThrowsError(ErrorKind::kCorruption,
                  "ck/metadata.json: tensor 'w': stored chunks[0] [1:52] (file __0_0.bin, "
                  "rank 0) and chunks[1] [51:102] (file __2_0.bin, rank 2) overlap in "
                  "[51:52]"));
  StoredTensor twice = Tiled({4, 2}, {Chunk({0, 0}, {2, 2}, 0), Chunk({2, 0}, {2, 2}, 1)});
  twice.chunks.push_back(twice.chunks[0]);
  EXPECT_THAT([&] { CheckOne(twice); }, ThrowsError(ErrorKind::kCorruption,
                                                    "chunks[0] [0:2, 0:2] (file __0_0.bin, rank 0) "
                                                    "and chunks[2] [0:2, 0:2]"));
  EXPECT_THAT(
      [] {
        CheckOne(Tiled(
            {2, 3}, {Flat(Chunk({0, 0}, {2, 3}, 0), 0, 4), Flat(Chunk({0, 0}, {2, 3}, 1), 3, 6)}));
      },
      ThrowsError(ErrorKind::kCorruption,
                  "chunks[0] [0:2, 0:3] flat [0, 4) (file __0_0.bin, rank 0) and chunks[1] "
                  "[0:2, 0:3] flat [3, 6) (file __1_0.bin, rank 1) overlap in [1:2, 0:1]"));
}

TEST(CheckChunkTilingTest, GapIsIncompleteNamingTheRegion) {
  EXPECT_THAT(
      [] {
        CheckOne(Tiled({6, 4}, {Chunk({0, 0}, {2, 4}, 0), Chunk({4, 0}, {2, 4}, 2)}));
      },
      ThrowsError(ErrorKind::kIncomplete,
                  "ck/metadata.json: tensor 'w': elements [2:4, 0:4] of global shape "
                  "(6, 4) are in no stored chunk (16 of 24 elements stored in 2 chunks)"));
  EXPECT_THAT(
      [] {
        CheckOne(Tiled({2, 3}, {Flat(Chunk({0, 0}, {2, 3}, 0), 0, 4)}));
      },
      ThrowsError(ErrorKind::kIncomplete, "elements [1:2, 1:3] of global shape (2, 3)"));
  EXPECT_THAT([] { CheckOne(Tiled({3}, {})); },
              ThrowsError(ErrorKind::kIncomplete,
                          "elements [0:3] of global shape (3,) are in no "
                          "stored chunk (0 of 3 elements stored in 0 chunks)"));
}

TEST(CheckChunkTilingTest, ChunkOutsideTheShapeOrOfAnotherRankIsCorruption) {
  EXPECT_THAT(
      [] {
        CheckOne(Tiled({4}, {Chunk({0}, {2}, 0), Chunk({2}, {3}, 1)}));
      },
      ThrowsError(ErrorKind::kCorruption,
                  "tensor 'w': chunks[1] [2:5] (file __1_0.bin, rank 1) lies outside the "
                  "global shape (4,)"));
  EXPECT_THAT(
      [] {
        CheckOne(Tiled({4}, {Chunk({0, 0}, {4, 1}, 0)}));
      },
      ThrowsError(ErrorKind::kCorruption, "has 2 dims, the tensor has 1"));
}

}  // namespace
}  // namespace distckpt
