#include "format/native/native_reader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <tuple>

#include "format/block_checksums.h"
#include "format/native/example_checkpoint.h"
#include "format/native/metadata_json.h"
#include "format/tiles_testing.h"
#include "io/fault_env.h"
#include "io/forwarding_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

class NativeReaderTest : public testing::Test {
 protected:
  void SetUp() override {
    SaveExampleCheckpoint(Env::Default(), dir_);
    reader_ = NativeFormat().OpenReader(&env_, dir_);
    metadata_reads_ = env_.read_calls();
    metadata_bytes_ = env_.bytes_read();
  }

  // Data-file reads since the reader opened (which read metadata.json).
  uint64_t ReadCalls() const { return env_.read_calls() - metadata_reads_; }
  uint64_t BytesRead() const { return env_.bytes_read() - metadata_bytes_; }

  const StoredTensor& Tensor(const std::string& key) const {
    return reader_->metadata().tensors.at(key);
  }
  // Rank 1's chunk of "w": rows [4, 8) of a f32 [8, 5] tensor, 80 bytes.
  const StoredChunk& W1() const { return Tensor("w").chunks[1]; }

  // Flips one bit of data file `file` at byte `offset`.
  void FlipByte(const std::string& file, uint64_t offset) {
    std::fstream f(JoinPath(dir_, file), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x10));
    ASSERT_TRUE(f.good());
  }

  ScopedTempDir tmp_;
  const std::string dir_ = JoinPath(tmp_.path(), "ckpt");
  FaultInjectionEnv env_{Env::Default()};
  std::unique_ptr<CheckpointReader> reader_;
  uint64_t metadata_reads_ = 0;
  uint64_t metadata_bytes_ = 0;
};

TEST_F(NativeReaderTest, WholeReadsAreVerified) {
  size_t chunks = 0;
  uint64_t bytes = 0;
  for (const auto& [key, tensor] : reader_->metadata().tensors) {
    for (const StoredChunk& chunk : tensor.chunks) {
      std::vector<std::byte> got(chunk.length);
      ReadRun run{0, chunk.length, got.data()};
      reader_->ReadChunk(tensor, chunk, {&run, 1}, VerifyPolicy::kWhenWhole);
      EXPECT_EQ(got, ExampleChunkBytes(key, chunk));
      ++chunks;
      bytes += chunk.length;
    }
  }
  EXPECT_EQ(reader_->stats().chunks_verified, chunks);
  EXPECT_EQ(reader_->stats().chunks_unverified, 0u);
  EXPECT_EQ(reader_->stats().bytes_read, bytes);
  // Per chunk: its block checksums (8 bytes per tile: "w"'s 8 and 8; flat's
  // elements [0, 10) and [10, 24) of (4, 6), a tile per element (a tp cut at
  // each column, a row cut at each row): 10 and 14; "b"'s 3), then its payload.
  EXPECT_EQ(reader_->stats().checksum_bytes_read, 8 * (8 + 8 + 10 + 14 + 3));
  EXPECT_EQ(ReadCalls(), 2 * chunks);
  EXPECT_EQ(BytesRead(), bytes + reader_->stats().checksum_bytes_read);
}

// W1 is 80 bytes in blocks of 16; version 3 stores their 5 checksums after
// the payload, and metadata.json their checksum.
TEST_F(NativeReaderTest, ExampleChunksHaveBlocks) {
  EXPECT_EQ(W1().block_size, 16u);
  EXPECT_TRUE(W1().block_checksums.empty());
  EXPECT_FALSE(W1().checksum.has_value());
  const std::string data = ReadFileToString(Env::Default(), JoinPath(dir_, W1().file));
  // Version 4 tiles: rows [4, 8) of 8 (a cut at tp=8 after each row) of 20
  // bytes, each in pieces of 8 and 12 bytes (at most 16).
  EXPECT_EQ(W1().tiles, 8u);
  ASSERT_GE(data.size(), W1().offset + 80 + 64);
  const std::vector<std::byte> payload = ExampleChunkBytes("w", W1());
  const uint64_t seed = ChunkBindingSeed("w", DType::kF32, W1());
  std::vector<uint64_t> sums(8);
  std::memcpy(sums.data(), data.data() + W1().offset + 80, 64);
  for (uint64_t b = 0; b < 8; ++b) {
    const uint64_t from = 20 * (b / 2) + (b % 2 == 0 ? 0 : 8), size = b % 2 == 0 ? 8 : 12;
    EXPECT_EQ(sums[b], BlockChecksum(std::span(payload).subspan(from, size), seed, b)) << b;
  }
  EXPECT_EQ(W1().sums_checksum, SumsChecksum(sums, seed));
}

// Rows 1..2, columns 1..2 of W1: two 8-byte runs, 12 bytes apart in the
// file, in tiles 2..5 (bytes [20, 60)): those are read whole (one read) and
// verified.
TEST_F(NativeReaderTest, PartialReadsVerifyTheBlocksTheyTouch) {
  std::vector<std::byte> got(16);
  const ReadRun runs[] = {{24, 8, got.data()}, {44, 8, got.data() + 8}};
  reader_->ReadChunk(Tensor("w"), W1(), runs, VerifyPolicy::kWhenWhole);
  const std::vector<std::byte> all = ExampleChunkBytes("w", W1());
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 8, all.begin() + 24));
  EXPECT_TRUE(std::equal(got.begin() + 8, got.end(), all.begin() + 44));
  EXPECT_EQ(reader_->stats().bytes_read, 40u);
  EXPECT_EQ(BytesRead(), 64u + 40u);  // the chunk's block checksums, then the blocks
  EXPECT_EQ(ReadCalls(), 2u);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  EXPECT_EQ(reader_->stats().chunks_unverified, 0u);

  // A run across a block boundary reads both blocks.
  const ReadRun across[] = {{56, 8, got.data()}};  // tiles [48, 60) and [60, 68)
  reader_->ReadChunk(Tensor("w"), W1(), across, VerifyPolicy::kWhenWhole);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 8, all.begin() + 56));
  EXPECT_EQ(BytesRead(), 64u + 40u + 64u + 20u);
  EXPECT_EQ(reader_->stats().chunks_verified, 2u);
}

TEST_F(NativeReaderTest, NeverReadsExactlyTheRuns) {
  std::vector<std::byte> got(16);
  const ReadRun runs[] = {{24, 8, got.data()}, {44, 8, got.data() + 8}};
  reader_->ReadChunk(Tensor("w"), W1(), runs, VerifyPolicy::kNever);
  const std::vector<std::byte> all = ExampleChunkBytes("w", W1());
  EXPECT_TRUE(std::equal(got.begin() + 8, got.end(), all.begin() + 44));
  EXPECT_EQ(BytesRead(), 16u);
  EXPECT_EQ(reader_->stats().chunks_unverified, 1u);
}

TEST_F(NativeReaderTest, RunsAdjacentInFileAndMemoryBecomeOneRead) {
  std::vector<std::byte> got(80);
  const ReadRun contiguous[] = {
      {0, 20, got.data()}, {20, 40, got.data() + 20}, {60, 20, got.data() + 60}};
  reader_->ReadChunk(Tensor("w"), W1(), contiguous, VerifyPolicy::kNever);
  EXPECT_EQ(ReadCalls(), 1u);
  EXPECT_EQ(got, ExampleChunkBytes("w", W1()));
  // Verified reads read the block checksums, then the touched blocks in one window.
  std::vector<std::byte> again(80);
  const ReadRun contiguous2[] = {
      {0, 20, again.data()}, {20, 40, again.data() + 20}, {60, 20, again.data() + 60}};
  reader_->ReadChunk(Tensor("w"), W1(), contiguous2, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(ReadCalls(), 3u);
  EXPECT_EQ(again, ExampleChunkBytes("w", W1()));
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);

  std::vector<std::byte> scattered(80);  // adjacent in the file, not in memory
  const ReadRun swapped[] = {{0, 40, scattered.data() + 40}, {40, 40, scattered.data()}};
  reader_->ReadChunk(Tensor("w"), W1(), swapped, VerifyPolicy::kNever);
  EXPECT_EQ(ReadCalls(), 5u);
  reader_->ReadChunk(Tensor("w"), W1(), swapped, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(ReadCalls(), 7u);
  const std::vector<std::byte> all = ExampleChunkBytes("w", W1());
  EXPECT_TRUE(std::equal(all.begin(), all.begin() + 40, scattered.begin() + 40));
  EXPECT_TRUE(std::equal(all.begin() + 40, all.end(), scattered.begin()));
  EXPECT_EQ(reader_->stats().chunks_verified, 2u);
}

// Issue 15 defect 1: a flipped byte in a chunk that a load reads only partly
// went unnoticed. Every block a read touches is verified now.
TEST_F(NativeReaderTest, FlippedByteIsCaughtByEveryReadTouchingItsBlock) {
  FlipByte(W1().file, W1().offset + 70);
  std::vector<std::byte> got(80);
  ReadRun whole{0, 80, got.data()};
  const std::string mismatch = "checksum mismatch in " + JoinPath(dir_, "__1_0.bin") +
                               " for key 'w' chunk at global offset (4, 0) written by rank 1: "
                               "block 7 (bytes [68, 80) of the chunk";
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), W1(), {&whole, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, mismatch));
  EXPECT_NO_THROW(reader_->ReadChunk(Tensor("w"), W1(), {&whole, 1}, VerifyPolicy::kNever));

  ReadRun partial{68, 4, got.data()};  // one element of the last row
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), W1(), {&partial, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, mismatch));

  ReadRun head{0, 40, got.data()};  // tiles 0..3: intact, verified
  reader_->ReadChunk(Tensor("w"), W1(), {&head, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), W1(), {&head, 1}, VerifyPolicy::kAlways);
      },
      ThrowsError(ErrorKind::kCorruption, mismatch));  // kAlways reads every block
}

TEST_F(NativeReaderTest, AlwaysVerifiesPartialReadsOfIntactChunks) {
  std::vector<std::byte> got(8);
  ReadRun run{44, 8, got.data()};
  reader_->ReadChunk(Tensor("w"), W1(), {&run, 1}, VerifyPolicy::kAlways);
  const std::vector<std::byte> all = ExampleChunkBytes("w", W1());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + 44));
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  EXPECT_EQ(BytesRead(), 64u + 80u);
}

// A damaged block checksum is told apart from damaged data: it fails the
// checksum metadata.json keeps of the chunk's block checksums, and names the
// file, the key and the rank. Reads that verify nothing do not need them.
TEST_F(NativeReaderTest, FlippedBlockChecksumIsCaught) {
  FlipByte(W1().file, W1().offset + 80 + 8 * 2 + 3);  // block 2's checksum
  std::vector<std::byte> got(80);
  ReadRun head{0, 8, got.data()};  // block 0 only: the chunk's block checksums are checked whole
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), W1(), {&head, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption,
                  "checksum mismatch in " + JoinPath(dir_, "__1_0.bin") +
                      " for key 'w' chunk at global offset (4, 0) written by rank 1: its block "
                      "checksums (the 64 bytes at file offset 80, after the payload) hash to"));
  ReadRun whole{0, 80, got.data()};
  reader_->ReadChunk(Tensor("w"), W1(), {&whole, 1}, VerifyPolicy::kNever);
  EXPECT_EQ(got, ExampleChunkBytes("w", W1()));
  EXPECT_EQ(reader_->stats().chunks_verified, 0u);
}

// A whole chunk read into one destination takes payload and block checksums
// in one gathered read; it must catch what reading them apart catches, with
// the same message, and count the same bytes: two runs that tile the chunk
// take the windowed path, one run the gathered one.
TEST_F(NativeReaderTest, GatheredWholeReadsCatchWhatWindowedReadsCatch) {
  const StoredChunk& w1 = W1();
  auto message = [&](bool gathered) {
    std::vector<std::byte> got(80);
    const ReadRun one[] = {{0, 80, got.data()}};
    const ReadRun two[] = {{0, 40, got.data()}, {40, 40, got.data() + 40}};
    const uint64_t bytes = reader_->stats().bytes_read, sums = reader_->stats().checksum_bytes_read;
    std::string error;
    try {
      reader_->ReadChunk(Tensor("w"), w1,
                         gathered ? std::span<const ReadRun>(one) : std::span<const ReadRun>(two),
                         VerifyPolicy::kWhenWhole);
      EXPECT_EQ(got, ExampleChunkBytes("w", w1));
      EXPECT_EQ(reader_->stats().bytes_read - bytes, 80u);
      EXPECT_EQ(reader_->stats().checksum_bytes_read - sums, 64u);
    } catch (const CheckpointError& e) {
      error = e.what();
    }
    return error;
  };
  EXPECT_EQ(message(true), "");
  EXPECT_EQ(message(false), "");
  // A payload byte of each block, then a byte of each block's checksum.
  for (uint64_t at : {3, 17, 40, 63, 79, 80 + 1, 80 + 8 * 4 + 7}) {
    FlipByte(w1.file, w1.offset + at);
    const std::string windowed = message(false);
    EXPECT_THAT(windowed, testing::HasSubstr("checksum mismatch in ")) << at;
    EXPECT_EQ(message(true), windowed) << at;
    FlipByte(w1.file, w1.offset + at);  // back
  }
  EXPECT_EQ(message(true), "");
}

// ReadChunks of chunks lying back to back in their files (each read whole)
// takes one gathered read per run of them, and gives what ReadChunk of each
// in turn gives: the bytes, the stats, and for a flipped byte anywhere (a
// payload block or a block checksum of any chunk of a batch) or a file cut
// short, the same error.
TEST_F(NativeReaderTest, BatchedReadsOfBackToBackChunksEqualReadsOfEach) {
  struct Item {
    const StoredTensor* tensor;
    const StoredChunk* chunk;
  };
  std::vector<Item> items;  // every chunk, in file order
  for (const auto& [key, tensor] : reader_->metadata().tensors) {
    for (const StoredChunk& chunk : tensor.chunks) items.push_back({&tensor, &chunk});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.chunk->file, a.chunk->offset) < std::tie(b.chunk->file, b.chunk->offset);
  });
  // Runs of chunks that start where the one before ends (its sums included).
  size_t runs = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StoredChunk& c = *items[i].chunk;
    const StoredChunk* before = i > 0 ? items[i - 1].chunk : nullptr;
    if (!before || before->file != c.file ||
        before->offset + before->length + SumsBytes(*before) != c.offset) {
      ++runs;
    }
  }
  ASSERT_LT(runs, items.size()) << "no two chunks lie back to back: nothing is batched";

  struct Outcome {
    std::vector<std::vector<std::byte>> bytes;
    uint64_t bytes_read = 0, sums_read = 0, verified = 0, gathered = 0;
    std::string error;
  };
  auto read = [&](bool batched, VerifyPolicy policy) {
    GatherCountingEnv env(Env::Default());
    std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(&env, dir_);
    Outcome out;
    std::vector<ReadRun> whole(items.size());
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < items.size(); ++i) {
      out.bytes.emplace_back(items[i].chunk->length);
      whole[i] = {0, items[i].chunk->length, out.bytes.back().data()};
      reads.push_back({items[i].tensor, items[i].chunk, std::span(&whole[i], 1)});
    }
    try {
      if (batched) {
        reader->ReadChunks(reads, policy);
      } else {
        for (const ChunkRead& r : reads) reader->ReadChunk(*r.tensor, *r.chunk, r.runs, policy);
      }
    } catch (const CheckpointError& e) {
      out.error = e.what();
    }
    out.bytes_read = reader->stats().bytes_read;
    out.sums_read = reader->stats().checksum_bytes_read;
    out.verified = reader->stats().chunks_verified;
    out.gathered = env.gathered();
    return out;
  };
  for (VerifyPolicy policy : {VerifyPolicy::kWhenWhole, VerifyPolicy::kNever}) {
    const Outcome each = read(false, policy), batched = read(true, policy);
    EXPECT_EQ(batched.error, "");
    for (size_t i = 0; i < items.size(); ++i) {
      EXPECT_EQ(batched.bytes[i], ExampleChunkBytes(items[i].tensor->key, *items[i].chunk));
      EXPECT_EQ(batched.bytes[i], each.bytes[i]);
    }
    EXPECT_EQ(batched.bytes_read, each.bytes_read);
    EXPECT_EQ(batched.sums_read, each.sums_read);
    EXPECT_EQ(batched.verified, each.verified);
    // Unverified reads take no sums and are not gathered.
    EXPECT_EQ(each.gathered, policy == VerifyPolicy::kNever ? 0 : items.size());
    EXPECT_EQ(batched.gathered, policy == VerifyPolicy::kNever ? 0 : runs);
  }
  for (const Item& item : items) {
    const StoredChunk& c = *item.chunk;
    const uint64_t sums = SumsBytes(c);
    for (uint64_t at : {uint64_t{0}, c.length / 2, c.length - 1, c.length, c.length + sums - 1}) {
      FlipByte(c.file, c.offset + at);
      const Outcome each = read(false, VerifyPolicy::kWhenWhole);
      EXPECT_THAT(each.error, testing::HasSubstr("checksum mismatch in ")) << at;
      EXPECT_EQ(read(true, VerifyPolicy::kWhenWhole).error, each.error) << item.tensor->key;
      FlipByte(c.file, c.offset + at);  // back
    }
  }
  // Each file cut inside its last chunk's sums, then inside its payload.
  int truncated = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StoredChunk& c = *items[i].chunk;
    if (i + 1 < items.size() && items[i + 1].chunk->file == c.file) continue;
    const std::string path = JoinPath(dir_, c.file);
    std::filesystem::copy_file(path, path + ".whole");
    for (uint64_t keep : {c.offset + c.length + 1, c.offset + c.length / 2}) {
      std::filesystem::resize_file(path, keep);
      const Outcome each = read(false, VerifyPolicy::kWhenWhole);
      EXPECT_THAT(each.error, testing::HasSubstr("is truncated")) << path;
      EXPECT_EQ(read(true, VerifyPolicy::kWhenWhole).error, each.error) << path;
      std::filesystem::copy_file(path + ".whole", path,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    ++truncated;
  }
  EXPECT_EQ(truncated, 2);  // both ranks' files
}

// Checksums are bound to the chunk: the bytes of W1 checked against another
// key, box or dtype do not verify.
TEST_F(NativeReaderTest, ChecksumsAreBoundToKeyBoxAndDtype) {
  std::vector<std::byte> got(80);
  ReadRun whole{0, 80, got.data()};
  StoredTensor renamed = Tensor("w");
  renamed.key = "w2";
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(renamed, W1(), {&whole, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "key 'w2' chunk at global offset (4, 0)"));
  StoredChunk moved = W1();
  moved.box.offset = {0, 0};
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), moved, {&whole, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "checksum mismatch"));
  StoredTensor relabelled = Tensor("w");
  relabelled.dtype = DType::kI32;
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(relabelled, W1(), {&whole, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "checksum mismatch"));
}

TEST_F(NativeReaderTest, ObjectsAreVerified) {
  const StoredObject& rng1 = reader_->metadata().objects.at("rng/shard_1_2");
  EXPECT_EQ(reader_->ReadObject(rng1), ExampleObjectPayload(1));
  FlipByte(rng1.file, rng1.offset + 3);
  EXPECT_THAT([&] { reader_->ReadObject(rng1); },
              ThrowsError(ErrorKind::kCorruption, "for object 'rng/shard_1_2': expected"));
  StoredObject renamed = reader_->metadata().objects.at("rng/shard_0_2");
  renamed.unique_key = "rng/shard_1_2";  // rank 0's intact payload under rank 1's key
  EXPECT_THAT([&] { reader_->ReadObject(renamed); },
              ThrowsError(ErrorKind::kCorruption, "for object 'rng/shard_1_2': expected"));
}

TEST_F(NativeReaderTest, TruncatedOrMissingDataFileIsCorruption) {
  const std::string path = JoinPath(dir_, "__1_0.bin");
  // Only the block checksums after the payload cut off: a verified read
  // needs them, one that verifies nothing does not.
  std::filesystem::resize_file(path, W1().offset + 80 + 60);
  std::vector<std::byte> got(80);
  ReadRun run{0, 8, got.data()};
  const std::string truncated = "data file " + path +
                                " is truncated: key 'w' chunk at global offset (4, 0) written by "
                                "rank 1 needs bytes [0, 144), as " +
                                JoinPath(dir_, "metadata.json") + " records, the file has ";
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("w"), W1(), {&run, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, truncated + "140"));
  reader_->ReadChunk(Tensor("w"), W1(), {&run, 1}, VerifyPolicy::kNever);
  std::filesystem::resize_file(path, W1().offset + 50);
  std::unique_ptr<CheckpointReader> reopened = NativeFormat().OpenReader(&env_, dir_);
  EXPECT_THAT(
      [&] {
        reopened->ReadChunk(Tensor("w"), W1(), {&run, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, truncated + "50"));
  Env::Default()->RemoveFile(JoinPath(dir_, "__0_0.bin"));
  const StoredChunk& b = Tensor("b").chunks[0];
  ReadRun run_b{0, b.length, got.data()};
  EXPECT_THAT(
      [&] {
        reader_->ReadChunk(Tensor("b"), b, {&run_b, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "__0_0.bin is missing (key 'b' chunk"));
}

// Issue 39: metadata can claim any size; CheckStored confirms a chunk's
// byte range (and its block checksums) in its file, opening it only, before
// anyone allocates a buffer of that size; CheckTensorStored also that the
// chunks hold the tensor's global shape.
TEST_F(NativeReaderTest, CheckStoredConfirmsTheFileHoldsTheClaim) {
  reader_->CheckStored(Tensor("w"), W1());
  CheckTensorStored(*reader_, Tensor("w"));
  EXPECT_EQ(BytesRead(), 0u);
  StoredChunk huge = W1();
  huge.length = uint64_t{16} << 30;  // 16 GiB claimed in a file of a few hundred bytes
  EXPECT_THAT([&] { reader_->CheckStored(Tensor("w"), huge); },
              ThrowsError(ErrorKind::kCorruption, "__1_0.bin is truncated: key 'w'"));
  StoredTensor claimed = Tensor("w");
  claimed.global_shape = {int64_t{1} << 40, 5};
  EXPECT_THAT([&] { CheckTensorStored(*reader_, claimed); },
              ThrowsError(ErrorKind::kCorruption,
                          "tensor 'w': global shape (1099511627776, 5) of f32 takes more "
                          "bytes than its 2 stored chunks hold (160)"));
  EXPECT_EQ(BytesRead(), 0u);
}

TEST_F(NativeReaderTest, RejectsMalformedRuns) {
  std::vector<std::byte> got(80);
  const ReadRun overlapping[] = {{0, 20, got.data()}, {10, 20, got.data() + 20}};
  EXPECT_THAT([&] { reader_->ReadChunk(Tensor("w"), W1(), overlapping, VerifyPolicy::kNever); },
              ThrowsError(ErrorKind::kInvalidArgument, "overlap"));
  const ReadRun past_end[] = {{70, 20, got.data()}};
  EXPECT_THAT([&] { reader_->ReadChunk(Tensor("w"), W1(), past_end, VerifyPolicy::kNever); },
              ThrowsError(ErrorKind::kInvalidArgument, "exceed its 80 bytes"));
  EXPECT_EQ(ReadCalls(), 0u);
}

// StreamChunk of a version 4 chunk hands it out in pieces of whole units
// (W1: a group is one 20-byte row), each verified before it is handed out,
// reading no tile twice.
TEST_F(NativeReaderTest, StreamsVerifiedPiecesOfWholeTiles) {
  const std::vector<std::byte> all = ExampleChunkBytes("w", W1());
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> pieces;
  auto keep = [&](uint64_t offset, std::span<const std::byte> bytes) {
    pieces.emplace_back(offset, std::vector<std::byte>(bytes.begin(), bytes.end()));
  };
  const ReadRun whole[] = {{0, 80, nullptr}};
  reader_->StreamChunk(Tensor("w"), W1(), whole, VerifyPolicy::kWhenWhole, 32, keep);
  ASSERT_EQ(pieces.size(), 4u);  // rows [0, 40), [40, 80) in two rows each
  uint64_t at = 0;
  for (const auto& [offset, bytes] : pieces) {
    EXPECT_EQ(offset, at);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), all.begin() + offset)) << offset;
    at += bytes.size();
  }
  EXPECT_EQ(at, 80u);
  EXPECT_EQ(reader_->stats().bytes_read, 80u);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);

  // Two 8-byte runs in tiles 2..5: handed out as they are.
  pieces.clear();
  const ReadRun runs[] = {{24, 8, nullptr}, {44, 8, nullptr}};
  reader_->StreamChunk(Tensor("w"), W1(), runs, VerifyPolicy::kWhenWhole, 32, keep);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].first, 44u);
  EXPECT_TRUE(std::equal(pieces[1].second.begin(), pieces[1].second.end(), all.begin() + 44));
  EXPECT_EQ(reader_->stats().bytes_read, 80u + 40u);

  // Unverified pieces hold whole elements (bf16: 2 bytes) and no more than asked.
  pieces.clear();
  const StoredChunk& b = Tensor("b").chunks[0];
  const ReadRun b_all[] = {{0, 6, nullptr}};
  reader_->StreamChunk(Tensor("b"), b, b_all, VerifyPolicy::kNever, 3, keep);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].second.size(), 4u);
  EXPECT_EQ(reader_->stats().chunks_unverified, 1u);
}

TEST_F(NativeReaderTest, StreamedPiecesAfterDamageAreNotHandedOut) {
  FlipByte(W1().file, W1().offset + 70);  // tile 7
  std::vector<uint64_t> offsets;
  const ReadRun whole[] = {{0, 80, nullptr}};
  EXPECT_THAT(
      [&] {
        reader_->StreamChunk(
            Tensor("w"), W1(), whole, VerifyPolicy::kWhenWhole, 32,
            [&](uint64_t offset, std::span<const std::byte>) { offsets.push_back(offset); });
      },
      ThrowsError(ErrorKind::kCorruption, "block 7 (bytes [68, 80) of the chunk"));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 20}));  // the first piece, rows 0 and 1
}

TEST_F(NativeReaderTest, ConcurrentReadsShareOpenFiles) {
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const StoredChunk& chunk = Tensor("w").chunks[t % 2];
      std::vector<std::byte> got(chunk.length);
      ReadRun run{0, chunk.length, got.data()};
      reader_->ReadChunk(Tensor("w"), chunk, {&run, 1}, VerifyPolicy::kWhenWhole);
      if (got != ExampleChunkBytes("w", chunk)) ++mismatches;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(reader_->stats().chunks_verified, 8u);
}

}  // namespace
}  // namespace distckpt

namespace distckpt {
namespace {

// A native checkpoint at `dir` of what `write(rank, writer)` writes for ranks 0 and 1.
void SaveTwoRanks(const std::string& dir,
                  const std::function<void(int rank, CheckpointWriter& writer)>& write) {
  Env* env = Env::Default();
  const Format& format = NativeFormat();
  const std::string write_dir = format.PrepareDirectory(env, dir, false);
  CheckpointMetadata merged;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<CheckpointWriter> writer = format.NewWriter(env, write_dir, rank);
    write(rank, *writer);
    merged.MergeFrom(writer->Finish());
  }
  merged.format_version = kNativeFormatVersion;
  format.Commit(env, dir, write_dir, merged);
}

// Version 4: a row-parallel bf16 weight [24, 48] saved under tp=2 (columns
// [0, 24) and [24, 48)) and read as tp=3 reads it (columns [16, 32): part of
// each chunk's every row) reads exactly the bytes it needs, every one of them
// verified: a flipped byte in any of them is refused naming file and key.
TEST(NativeReaderTilesTest, ColumnReshardReadsAndVerifiesExactlyItsBytes) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  const Format& format = NativeFormat();
  auto value = [](int64_t r, int64_t c) { return static_cast<uint16_t>(r * 131 + c * 7); };
  SaveTwoRanks(dir, [&](int rank, CheckpointWriter& writer) {
    std::vector<uint16_t> data;
    for (int64_t r = 0; r < 24; ++r) {
      for (int64_t c = 0; c < 24; ++c) data.push_back(value(r, rank * 24 + c));
    }
    writer.WriteTensorChunk("proj", DType::kBF16, {24, 48}, Box{{0, rank * 24}, {24, 24}},
                            std::nullopt, std::as_bytes(std::span(data)));
  });

  auto read_tp3 = [&](CheckpointReader& reader, std::vector<uint16_t>& out) {
    const StoredTensor& proj = reader.metadata().tensors.at("proj");
    out.assign(24 * 16, 0);
    for (const StoredChunk& chunk : proj.chunks) {
      const int64_t c0 = std::max<int64_t>(16, chunk.box.offset[1]);
      const int64_t c1 = std::min<int64_t>(32, chunk.box.offset[1] + 24);
      std::vector<ReadRun> runs;
      for (int64_t r = 0; r < 24; ++r) {
        runs.push_back({static_cast<uint64_t>((r * 24 + c0 - chunk.box.offset[1]) * 2),
                        static_cast<uint64_t>((c1 - c0) * 2),
                        reinterpret_cast<std::byte*>(&out[r * 16 + (c0 - 16)])});
      }
      reader.ReadChunk(proj, chunk, runs, VerifyPolicy::kWhenWhole);
    }
  };
  std::unique_ptr<CheckpointReader> reader = format.OpenReader(env, dir);
  EXPECT_EQ(reader->metadata().format_version, kNativeFormatVersion);
  std::vector<uint16_t> got;
  read_tp3(*reader, got);
  for (int64_t r = 0; r < 24; ++r) {
    for (int64_t c = 0; c < 16; ++c) ASSERT_EQ(got[r * 16 + c], value(r, 16 + c)) << r << "," << c;
  }
  EXPECT_EQ(reader->stats().bytes_read, 24u * 16 * 2);  // exactly the needed bytes
  EXPECT_EQ(reader->stats().chunks_verified, 2u);
  EXPECT_EQ(reader->stats().chunks_unverified, 0u);
  // The tiles' checksums: far fewer than a checksum per row piece.
  EXPECT_LE(reader->stats().checksum_bytes_read, 24u * 48 * 2 / 4);

  // A flipped byte in any needed byte is refused naming the file and key;
  // one outside them is not read.
  const StoredChunk& c1 = reader->metadata().tensors.at("proj").chunks[1];
  for (const auto& [column, caught] : std::vector<std::pair<int, bool>>{{3, true}, {12, false}}) {
    const std::string path = JoinPath(dir, c1.file);
    const uint64_t at = c1.offset + (5 * 24 + column) * 2;  // row 5 of rank 1's chunk
    std::string bytes = ReadFileToString(env, path);
    bytes[at] ^= 0x10;
    WriteFileAtomic(env, path, bytes);
    std::unique_ptr<CheckpointReader> damaged = format.OpenReader(env, dir);
    if (caught) {
      EXPECT_THAT([&] { read_tp3(*damaged, got); },
                  ThrowsError(ErrorKind::kCorruption, "checksum mismatch in " + path +
                                                          " for key 'proj' chunk at global "
                                                          "offset (0, 24)"));
    } else {
      read_tp3(*damaged, got);
      EXPECT_EQ(damaged->stats().bytes_read, 24u * 16 * 2);
    }
    bytes[at] ^= 0x10;
    WriteFileAtomic(env, path, bytes);
  }
}

// Version 5: the distributed optimizer's state of that weight, f32, saved
// under tp=2 with each rank's box flattened over 2 data-parallel ranks at
// elements 250 (mid-row: partial first and last rows), and read as tp=3
// reads it (columns [16, 32)) reads exactly the bytes it needs, verified: a
// flipped byte in a partly read flat tile is refused naming file and key.
TEST(NativeReaderTilesTest, FlatColumnReshardReadsAndVerifiesExactlyItsBytes) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  const Format& format = NativeFormat();
  auto value = [](int64_t r, int64_t c) { return static_cast<float>(r * 1000 + c); };
  SaveTwoRanks(dir, [&](int rank, CheckpointWriter& writer) {
    std::vector<float> box;
    for (int64_t r = 0; r < 24; ++r) {
      for (int64_t c = 0; c < 24; ++c) box.push_back(value(r, rank * 24 + c));
    }
    for (const FlatRange& f : {FlatRange{0, 250}, FlatRange{250, 576}}) {
      writer.WriteTensorChunk(
          "state", DType::kF32, {24, 48}, Box{{0, rank * 24}, {24, 24}}, f,
          std::as_bytes(std::span(box).subspan(static_cast<size_t>(f.start), f.size())));
    }
  });

  uint64_t needed = 0;
  auto read_tp3 = [&](CheckpointReader& reader, std::vector<float>& out) {
    const StoredTensor& state = reader.metadata().tensors.at("state");
    out.assign(24 * 16, 0);
    needed = 0;
    for (const StoredChunk& chunk : state.chunks) {
      const std::vector<ReadRun> runs = ColumnRunsOf(chunk, 16, 32, 4, [&](int64_t r, int64_t c) {
        return reinterpret_cast<std::byte*>(&out[r * 16 + c - 16]);
      });
      for (const ReadRun& run : runs) needed += run.length;
      reader.ReadChunk(state, chunk, runs, VerifyPolicy::kWhenWhole);
    }
  };
  std::unique_ptr<CheckpointReader> reader = format.OpenReader(env, dir);
  std::vector<float> got;
  read_tp3(*reader, got);
  for (int64_t r = 0; r < 24; ++r) {
    for (int64_t c = 0; c < 16; ++c) ASSERT_EQ(got[r * 16 + c], value(r, 16 + c)) << r << "," << c;
  }
  EXPECT_EQ(needed, 24u * 16 * 4);
  EXPECT_EQ(reader->stats().bytes_read, needed);  // exactly the needed bytes
  EXPECT_EQ(reader->stats().chunks_verified, 4u);
  EXPECT_EQ(reader->stats().chunks_unverified, 0u);
  for (const StoredChunk& chunk : reader->metadata().tensors.at("state").chunks)
    EXPECT_TRUE(chunk.flat_rows);

  // A flipped byte in any needed byte of a partial row or a whole one is
  // refused naming the file and key; one outside them is not read. Rank 1's
  // chunks (columns [24, 48), of which [24, 32) are needed): elements [0, 250)
  // of its box, whose last row (10) ends at column 10, and [250, 576).
  auto chunk_of = [&](int64_t start) -> const StoredChunk& {
    for (const StoredChunk& c : reader->metadata().tensors.at("state").chunks) {
      if (c.box.offset[1] == 24 && c.flat->start == start) return c;
    }
    ADD_FAILURE() << start;
    return reader->metadata().tensors.at("state").chunks[0];
  };
  struct Flip {
    int64_t start, row, column;  // of the box
    bool caught;
  };
  for (const Flip& flip :
       {Flip{0, 10, 4, true},      // the partial last row, needed
        Flip{0, 10, 9, false},     // ... not needed
        Flip{250, 10, 10, false},  // the partial first row: none needed
        Flip{250, 12, 3, true}, Flip{250, 12, 9, false}, Flip{250, 23, 7, true}}) {
    const StoredChunk& chunk = chunk_of(flip.start);
    const int64_t element = flip.row * 24 + flip.column - flip.start;
    const std::string path = JoinPath(dir, chunk.file);
    const uint64_t at = chunk.offset + static_cast<uint64_t>(element) * 4 + 1;
    std::string bytes = ReadFileToString(env, path);
    bytes[at] ^= 0x10;
    WriteFileAtomic(env, path, bytes);
    std::unique_ptr<CheckpointReader> damaged = format.OpenReader(env, dir);
    if (flip.caught) {
      EXPECT_THAT([&] { read_tp3(*damaged, got); },
                  ThrowsError(ErrorKind::kCorruption, "checksum mismatch in " + path +
                                                          " for key 'state' chunk at global "
                                                          "offset (0, 24)"))
          << flip.row << "," << flip.column;
    } else {
      read_tp3(*damaged, got);
      EXPECT_EQ(damaged->stats().bytes_read, needed) << flip.row << "," << flip.column;
    }
    bytes[at] ^= 0x10;
    WriteFileAtomic(env, path, bytes);
  }
}

}  // namespace
}  // namespace distckpt
