#include "format/checkpoint_metadata.h"

#include <gtest/gtest.h>

#include "io/testing.h"

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

}  // namespace
}  // namespace distckpt
