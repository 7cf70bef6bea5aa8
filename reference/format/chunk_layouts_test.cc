#include "format/chunk_layouts.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/error.h"
#include "format/block_checksums.h"

namespace distckpt {
namespace {

using Parts = std::vector<std::pair<uint64_t, uint64_t>>;

Parts AllParts(const BlockLayout& layout) {
  Parts parts;
  for (uint64_t t = 0; t < layout.tiles(); ++t)
    layout.ForEachPart(t, [&](uint64_t o, uint64_t n) { parts.emplace_back(o, n); });
  return parts;
}

// Two tensors: [1024, 512] f32 in two column chunks (version 4 tiles), [100] in
// one uniform (version 3) chunk.
CheckpointMetadata TwoTensors() {
  CheckpointMetadata md;
  StoredTensor& w = md.tensors["w"];
  w.key = "w";
  w.dtype = DType::kF32;
  w.global_shape = {1024, 512};
  for (int64_t column : {0, 256}) {
    StoredChunk c;
    c.box = Box{{0, column}, {1024, 256}};
    c.length = 1024 * 256 * 4;
    c.block_size = 4096;
    c.tiles = TileLayout(w, c).tiles();
    w.chunks.push_back(c);
  }
  StoredTensor& b = md.tensors["b"];
  b.key = "b";
  b.global_shape = {100};
  StoredChunk c;
  c.box = Box{{0}, {100}};
  c.length = 400;
  c.block_size = 64;
  b.chunks.push_back(c);
  return md;
}

TEST(ChunkLayoutsTest, KeepsEachChunkOfItsMetadataOnceAndEqualToChunkLayout) {
  const CheckpointMetadata md = TwoTensors();
  ChunkLayouts layouts;
  for (int round = 0; round < 2; ++round) {
    for (const auto& [key, tensor] : md.tensors) {
      for (const StoredChunk& chunk : tensor.chunks) {
        ChunkLayouts::Chunk storage;
        const ChunkLayouts::Chunk& got = layouts.Get(md, tensor, chunk, storage);
        EXPECT_NE(&got, &storage) << key;  // kept, not computed into storage
        EXPECT_EQ(AllParts(got.layout), AllParts(ChunkLayout(tensor, chunk))) << key;
        EXPECT_EQ(got.seed, ChunkBindingSeed(tensor.key, tensor.dtype, chunk)) << key;
        EXPECT_EQ(&layouts.Get(md, tensor, chunk, storage), &got) << key;  // the same one
      }
    }
    EXPECT_EQ(layouts.kept(), 3u);
  }
  ChunkLayouts::Chunk spare;
  const StoredTensor& w = md.tensors.at("w");
  EXPECT_FALSE(layouts.Get(md, w, w.chunks[1], spare).layout.contiguous());  // tiles of row pieces
}

TEST(ChunkLayoutsTest, OtherMetadataIsComputedNotKept) {
  const CheckpointMetadata md = TwoTensors(), copy = TwoTensors();
  ChunkLayouts layouts;
  ChunkLayouts::Chunk storage;
  layouts.Get(md, md.tensors.at("b"), md.tensors.at("b").chunks[0], storage);
  const StoredTensor& w = copy.tensors.at("w");
  // A copy's chunk, with the copy's metadata or with the tied one's tensor.
  EXPECT_EQ(&layouts.Get(copy, w, w.chunks[0], storage), &storage);
  EXPECT_EQ(&layouts.Get(md, md.tensors.at("w"), w.chunks[0], storage), &storage);
  StoredChunk loose = w.chunks[1];
  EXPECT_EQ(&layouts.Get(md, md.tensors.at("w"), loose, storage), &storage);
  EXPECT_EQ(AllParts(storage.layout), AllParts(ChunkLayout(w, loose)));
  EXPECT_EQ(storage.seed, ChunkBindingSeed(w.key, w.dtype, loose));
  EXPECT_EQ(layouts.kept(), 1u);
}

TEST(ChunkLayoutsTest, AWrongTileCountThrowsEveryTimeAndKeepsNothing) {
  CheckpointMetadata md = TwoTensors();
  md.tensors.at("w").chunks[0].tiles += 1;
  ChunkLayouts layouts;
  ChunkLayouts::Chunk storage;
  const StoredTensor& w = md.tensors.at("w");
  for (int i = 0; i < 2; ++i) {
    try {
      layouts.Get(md, w, w.chunks[0], storage);
      ADD_FAILURE() << "no error";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
      EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(layouts.kept(), 0u);
}

TEST(ChunkLayoutsTest, ConcurrentGetsShareOneLayout) {
  const CheckpointMetadata md = TwoTensors();
  ChunkLayouts layouts;
  const StoredTensor& w = md.tensors.at("w");
  std::vector<const ChunkLayouts::Chunk*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      ChunkLayouts::Chunk storage;
      seen[i] = &layouts.Get(md, w, w.chunks[1], storage);
    });
  }
  for (auto& t : threads) t.join();
  for (const ChunkLayouts::Chunk* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(layouts.kept(), 1u);
}

// TileCounter remembers the last inputs only: each chunk below differs
// from the one before in one input (or in none), and gets TileLayout's count.
TEST(TileCounterTest, CountsAsTileLayoutAcrossChangingInputs) {
  struct Case {
    DType dtype;
    Shape global;
    Box box;
    std::optional<FlatRange> flat;
    bool flat_rows;
    uint64_t block_size;
  };
  const std::vector<Case> cases = {
      {DType::kF32, {180, 2}, {{0, 0}, {45, 2}}, std::nullopt, true, 32},
      {DType::kF32, {180, 2}, {{0, 0}, {45, 2}}, std::nullopt, true, 32},        // same
      {DType::kF32, {180, 2}, {{90, 0}, {45, 2}}, std::nullopt, true, 32},       // offset
      {DType::kF32, {150, 2}, {{90, 0}, {45, 2}}, std::nullopt, true, 32},       // global shape
      {DType::kF64, {150, 2}, {{90, 0}, {45, 2}}, std::nullopt, true, 32},       // element size
      {DType::kF64, {150, 2}, {{90, 0}, {45, 2}}, FlatRange{3, 61}, true, 32},   // flat
      {DType::kF64, {150, 2}, {{90, 0}, {45, 2}}, FlatRange{3, 61}, false, 32},  // flat kind
      {DType::kF64, {150, 2}, {{90, 0}, {45, 2}}, FlatRange{3, 45}, false, 32},  // flat range
      {DType::kF64, {150, 2}, {{90, 0}, {45, 2}}, FlatRange{3, 45}, false, 16},  // block size
  };
  TileCounter counter;
  std::vector<uint64_t> tiles;
  for (const Case& c : cases) {
    StoredTensor tensor;
    tensor.key = "k" + std::to_string(tiles.size());
    tensor.dtype = c.dtype;
    tensor.global_shape = c.global;
    StoredChunk chunk;
    chunk.box = c.box;
    chunk.flat = c.flat;
    chunk.flat_rows = c.flat_rows;
    chunk.length = static_cast<uint64_t>(chunk.numel()) * DTypeSize(c.dtype);
    chunk.block_size = c.block_size;
    const uint64_t want = TileLayout(tensor, chunk).tiles();
    EXPECT_EQ(counter.Tiles(tensor, chunk), want) << tiles.size();
    tiles.push_back(want);
  }
  // Each change of input above changes the count (else the test shows nothing).
  EXPECT_EQ(tiles[1], tiles[0]);
  for (size_t i = 2; i < tiles.size(); ++i) EXPECT_NE(tiles[i], tiles[i - 1]) << i;
}

}  // namespace
}  // namespace distckpt
