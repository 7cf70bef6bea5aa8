// Save side of the native format: round trip, commit protocol, overwrite via
// staging, stale-file cleanup, detection. Reads are in native_reader_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>

#include "format/block_checksums.h"
#include "format/dcp/megatron_files.h"
#include "format/format.h"
#include "format/native/example_checkpoint.h"
#include "format/native/metadata_json.h"
#include "format/native/native_writer.h"
#include "format/staged_overwrite.h"
#include "io/checksum.h"
#include "io/fault_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

std::vector<std::byte> ReadWhole(CheckpointReader& reader, const StoredTensor& tensor,
                                 const StoredChunk& chunk) {
  std::vector<std::byte> bytes(chunk.length);
  ReadRun run{0, chunk.length, bytes.data()};
  reader.ReadChunk(tensor, chunk, {&run, 1}, VerifyPolicy::kWhenWhole);
  return bytes;
}

// Every chunk and object of the checkpoint at `dir` holds the example's values for `seed`.
void ExpectExample(Env* env, const std::string& dir, int seed) {
  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(env, dir);
  EXPECT_EQ(reader->metadata().common["iteration"], 100 + seed);
  for (const auto& [key, tensor] : reader->metadata().tensors) {
    for (const StoredChunk& chunk : tensor.chunks) {
      EXPECT_EQ(ReadWhole(*reader, tensor, chunk), ExampleChunkBytes(key, chunk, seed)) << key;
    }
  }
  for (const auto& [unique_key, object] : reader->metadata().objects) {
    EXPECT_EQ(reader->ReadObject(object), ExampleObjectPayload(object.writer_rank, seed));
  }
}

TEST(NativeFormatTest, WriteCommitReadRoundTrip) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  const CheckpointMetadata saved = SaveExampleCheckpoint(env, dir);

  EXPECT_EQ(env->ListDir(dir),
            (std::vector<std::string>{"__0_0.bin", "__1_0.bin", "metadata.json"}));
  // Each chunk's payload, then its block checksums (8 bytes per block: "w"'s
  // 4 rows of 2 pieces; flat's elements [0, 10) of (4, 6): row 0's 6 pieces
  // of an element (a tp cut at each) and 4 of row 1; "b"'s 3 elements).
  EXPECT_EQ(env->FileSize(JoinPath(dir, "__0_0.bin")),
            80u + 64u + 40u + 80u + 6u + 24u + ExampleObjectPayload(0).size());
  EXPECT_EQ(&DetectFormat(env, dir), &NativeFormat());

  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  EXPECT_EQ(md, saved);
  EXPECT_EQ(md.format, "native");
  EXPECT_EQ(md.format_version, 5);
  EXPECT_EQ(md.writer, "distckpt 0.1.0");
  EXPECT_EQ(md.topology, "tp=2");
  ASSERT_EQ(md.tensors.size(), 3u);
  const StoredTensor& flat = md.tensors.at("flat");
  ASSERT_EQ(flat.chunks.size(), 2u);
  EXPECT_EQ(flat.chunks[1].flat, (FlatRange{10, 24}));
  EXPECT_EQ(flat.chunks[1].file, "__1_0.bin");
  EXPECT_EQ(flat.chunks[1].offset, 144u);  // after rank 1's "w" chunk and its checksums
  EXPECT_EQ(flat.chunks[1].length, 56u);
  EXPECT_EQ(md.objects.size(), 2u);
  ExpectExample(env, dir, 0);
}

// What the chunks are, without where (the block checksums of version 3 sit
// between them) and without their checksums (which changed form in each version).
std::vector<std::tuple<std::string, Box, std::optional<FlatRange>, std::string, uint64_t>> Layout(
    const CheckpointMetadata& md) {
  std::vector<std::tuple<std::string, Box, std::optional<FlatRange>, std::string, uint64_t>> out;
  for (const auto& [key, tensor] : md.tensors) {
    for (const StoredChunk& c : tensor.chunks)
      out.emplace_back(key, c.box, c.flat, c.file, c.length);
  }
  return out;
}

// Opens testdata/v<version>, written by SaveExampleCheckpoint(seed 0) at that
// format version, and checks that it holds the example's chunks and values.
std::unique_ptr<CheckpointReader> OpenOldGolden(int version) {
  ScopedTempDir tmp;
  const std::string golden = fmt::format("{}/v{}", DISTCKPT_NATIVE_TESTDATA, version);
  const CheckpointMetadata fresh = SaveExampleCheckpoint(Env::Default(), JoinPath(tmp.path(), "c"));
  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(Env::Default(), golden);
  EXPECT_EQ(reader->metadata().format_version, version);
  EXPECT_EQ(Layout(reader->metadata()), Layout(fresh));
  ExpectExample(Env::Default(), golden, 0);
  return NativeFormat().OpenReader(Env::Default(), golden);  // fresh read statistics
}

// Version 1 must stay readable, bit for bit, by every later version.
TEST(NativeFormatTest, ReadsTheVersion1GoldenCheckpoint) {
  std::unique_ptr<CheckpointReader> reader = OpenOldGolden(1);
  EXPECT_EQ(reader->metadata().tensors.at("w").chunks[0].block_size, 0u);
  // Version 1 partial reads read exactly their bytes, unverified.
  const StoredTensor& w = reader->metadata().tensors.at("w");
  std::vector<std::byte> got(8);
  ReadRun run{8, 8, got.data()};
  reader->ReadChunk(w, w.chunks[0], {&run, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader->stats().chunks_unverified, 1u);
}

// Version 2 (block checksums in metadata.json) stays readable, verified per block.
TEST(NativeFormatTest, ReadsTheVersion2GoldenCheckpoint) {
  std::unique_ptr<CheckpointReader> reader = OpenOldGolden(2);
  const StoredTensor& w = reader->metadata().tensors.at("w");
  EXPECT_EQ(w.chunks[1].block_checksums.size(), 5u);
  EXPECT_FALSE(w.chunks[1].sums_checksum.has_value());
  // A partial read verifies the blocks it touches (bytes [16, 32) here).
  std::vector<std::byte> got(8);
  ReadRun run{20, 8, got.data()};
  reader->ReadChunk(w, w.chunks[1], {&run, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader->stats().chunks_verified, 1u);
  EXPECT_EQ(reader->stats().bytes_read, 16u);
  EXPECT_EQ(reader->stats().checksum_bytes_read, 0u);
}

// Version 3 (uniform blocks, their checksums after the payload) stays
// readable, verified per block: a partial read reads the blocks it touches.
TEST(NativeFormatTest, ReadsTheVersion3GoldenCheckpoint) {
  std::unique_ptr<CheckpointReader> reader = OpenOldGolden(3);
  const StoredTensor& w = reader->metadata().tensors.at("w");
  EXPECT_EQ(w.chunks[1].tiles, 0u);
  ASSERT_TRUE(w.chunks[1].sums_checksum.has_value());
  std::vector<std::byte> got(8);
  ReadRun run{20, 8, got.data()};
  reader->ReadChunk(w, w.chunks[1], {&run, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader->stats().chunks_verified, 1u);
  EXPECT_EQ(reader->stats().bytes_read, w.chunks[1].block_size);
  EXPECT_EQ(reader->stats().checksum_bytes_read,
            8 * BlockCount(w.chunks[1].length, w.chunks[1].block_size));
}

// Version 4 (flat chunks in uniform blocks, the rest in tiles) stays
// readable and verified: a partial read of a flat chunk reads its uniform
// blocks, and a flipped byte in one is refused naming the file and key.
TEST(NativeFormatTest, ReadsTheVersion4GoldenCheckpoint) {
  std::unique_ptr<CheckpointReader> reader = OpenOldGolden(4);
  const StoredTensor& flat = reader->metadata().tensors.at("flat");
  const StoredChunk& chunk = flat.chunks[1];  // elements [10, 24), 56 bytes
  ASSERT_EQ(chunk.flat, (FlatRange{10, 24}));
  EXPECT_FALSE(chunk.flat_rows);
  EXPECT_EQ(chunk.tiles, BlockCount(chunk.length, chunk.block_size));
  std::vector<std::byte> got(8);
  ReadRun run{20, 8, got.data()};
  reader->ReadChunk(flat, chunk, {&run, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader->stats().chunks_verified, 1u);
  EXPECT_EQ(reader->stats().bytes_read, chunk.block_size);  // bytes [16, 32): one block
  EXPECT_EQ(reader->stats().checksum_bytes_read, 8 * chunk.tiles);

  ScopedTempDir tmp;
  const std::string copy = JoinPath(tmp.path(), "v4");
  std::filesystem::copy(DISTCKPT_NATIVE_TESTDATA "/v4", copy);
  const std::string path = JoinPath(copy, chunk.file);
  std::string bytes = ReadFileToString(Env::Default(), path);
  bytes[chunk.offset + 30] ^= 0x10;  // in the block the read touches, not in the run
  WriteFileAtomic(Env::Default(), path, bytes);
  std::unique_ptr<CheckpointReader> damaged = NativeFormat().OpenReader(Env::Default(), copy);
  EXPECT_THAT(
      [&] {
        damaged->ReadChunk(flat, chunk, {&run, 1}, VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "checksum mismatch in " + path + " for key 'flat'"));
}

// testdata/v5 is what SaveExampleCheckpoint(seed 0) writes today, byte for
// byte (a change needs a version bump and a new golden directory).
// DISTCKPT_WRITE_GOLDEN=1 rewrites it.
TEST(NativeFormatTest, WritesAndReadsTheVersion5GoldenCheckpoint) {
  ScopedTempDir tmp;
  const std::string golden = DISTCKPT_NATIVE_TESTDATA "/v5";
  const std::string dir = JoinPath(tmp.path(), "c");
  const CheckpointMetadata fresh = SaveExampleCheckpoint(Env::Default(), dir);
  if (std::getenv("DISTCKPT_WRITE_GOLDEN") != nullptr) {
    std::filesystem::create_directories(golden);
    for (const std::string& name : Env::Default()->ListDir(dir)) {
      std::filesystem::copy_file(JoinPath(dir, name), JoinPath(golden, name),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  ASSERT_EQ(Env::Default()->ListDir(golden), Env::Default()->ListDir(dir));
  for (const std::string& name : Env::Default()->ListDir(dir)) {
    EXPECT_EQ(ReadFileToString(Env::Default(), JoinPath(golden, name)),
              ReadFileToString(Env::Default(), JoinPath(dir, name)))
        << name;
  }
  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(Env::Default(), golden);
  EXPECT_EQ(reader->metadata().format_version, 5);
  EXPECT_EQ(reader->metadata().tensors, fresh.tensors);
  EXPECT_EQ(reader->metadata().objects, fresh.objects);
  EXPECT_TRUE(reader->metadata().tensors.at("flat").chunks[0].flat_rows);
  ExpectExample(Env::Default(), golden, 0);
}

// Issue 15 defect 7, through the file: swapping two chunks' offsets in
// metadata.json made `dump` return a wrong tensor with exit 0.
TEST(NativeFormatTest, EditedMetadataIsRefused) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir);
  const std::string path = JoinPath(dir, "metadata.json");
  const std::string original = ReadFileToString(env, path);
  nlohmann::json j = nlohmann::json::parse(original);
  std::swap(j["tensors"]["w"]["chunks"][0]["offset"], j["tensors"]["w"]["chunks"][1]["offset"]);
  WriteFileAtomic(env, path, j.dump(2));
  EXPECT_THAT([&] { NativeFormat().OpenReader(env, dir); },
              ThrowsError(ErrorKind::kCorruption, path + ": metadata_checksum: checksum mismatch"));
  // Resealed by a tool: the block checksums, bound to the offsets, still catch it.
  j.erase("metadata_checksum");
  const std::string text = j.dump();
  j["metadata_checksum"] =
      ChecksumToHex(Checksum(std::as_bytes(std::span(text.data(), text.size()))));
  WriteFileAtomic(env, path, j.dump(2));
  std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(env, dir);
  const StoredTensor& w = reader->metadata().tensors.at("w");
  EXPECT_THAT([&] { ReadWhole(*reader, w, w.chunks[0]); },
              ThrowsError(ErrorKind::kCorruption, "checksum mismatch in " + JoinPath(dir, "__")));
}

// Opening a checkpoint again shares its parsed metadata (format/metadata_cache.h).
TEST(NativeFormatTest, ReopeningSharesTheParsedMetadata) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir);
  std::unique_ptr<CheckpointReader> a = NativeFormat().OpenReader(env, dir);
  std::unique_ptr<CheckpointReader> b = NativeFormat().OpenReader(env, dir);
  EXPECT_EQ(&a->metadata(), &b->metadata());
}

// A checkpoint overwritten at the same path is read anew, never from the
// metadata parsed before.
TEST(NativeFormatTest, ReopeningAnOverwrittenCheckpointReadsTheNewOne) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir, 0);
  ExpectExample(env, dir, 0);
  SaveExampleCheckpoint(env, dir, 1, /*overwrite=*/true);
  ExpectExample(env, dir, 1);
}

// metadata.json damaged in place after an open (same size, one byte): the
// next open parses it again and reports the damage.
TEST(NativeFormatTest, MetadataDamagedAfterAnOpenIsRefused) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir);
  NativeFormat().OpenReader(env, dir);
  const std::string path = JoinPath(dir, "metadata.json");
  std::string text = ReadFileToString(env, path);
  const size_t at = text.find("\"iteration\":100");
  ASSERT_NE(at, std::string::npos);
  text[at + 12] = '7';  // 100 -> 700
  WriteFileAtomic(env, path, text);
  EXPECT_THAT([&] { NativeFormat().OpenReader(env, dir); },
              ThrowsError(ErrorKind::kCorruption, path + ": metadata_checksum: checksum mismatch"));
}

TEST(NativeFormatTest, WriterRejectsInconsistentChunks) {
  ScopedTempDir tmp;
  std::unique_ptr<CheckpointWriter> writer =
      NativeFormat().NewWriter(Env::Default(), tmp.path(), 0);
  std::vector<std::byte> bytes(16);
  EXPECT_THAT(
      [&] {
        writer->WriteTensorChunk("w", DType::kF32, {4}, {{2}, {3}}, std::nullopt, bytes);
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "chunk [2:5] of tensor 'w' lies outside its global shape (4,)"));
  EXPECT_THAT(
      [&] {
        writer->WriteTensorChunk("w", DType::kF32, {4}, {{0}, {3}}, std::nullopt, bytes);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "got 16 bytes, but 3 elements of f32 take 12"));
  EXPECT_THAT(
      [&] {
        writer->WriteTensorChunk("w", DType::kF32, {4}, {{0}, {4}}, FlatRange{2, 5}, bytes);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "flat range [2, 5) of tensor 'w'"));
  writer->WriteTensorChunk("w", DType::kF32, {4}, {{0}, {4}}, std::nullopt, bytes);
  EXPECT_THAT(
      [&] {
        writer->WriteTensorChunk("w", DType::kI32, {4}, {{0}, {4}}, std::nullopt, bytes);
      },
      ThrowsError(ErrorKind::kShapeMismatch, "tensor 'w' written as dtype f32"));
  EXPECT_EQ(writer->bytes_written(), 16u);  // not the block's checksum after it
  writer->Finish();
  EXPECT_THAT([&] { writer->WriteObject("o", "o/shard_0_1", {1}, {0}, bytes); },
              ThrowsError(ErrorKind::kInvalidArgument, "already finished"));
}

TEST(NativeFormatTest, UncommittedDirectoryIsIncomplete) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  EXPECT_THAT(
      [&] { NativeFormat().OpenReader(env, dir); },
      ThrowsError(ErrorKind::kIncomplete, "Checkpoint directory " + dir + " does not exist"));
  SaveExampleCheckpoint(env, dir);
  env->RemoveFile(JoinPath(dir, "metadata.json"));
  EXPECT_THAT(
      [&] { NativeFormat().OpenReader(env, dir); },
      ThrowsError(
          ErrorKind::kIncomplete,
          dir + " is not a distributed checkpoint (metadata.json missing: save did not commit)"));
  EXPECT_THAT([&] { DetectFormat(env, dir); },
              ThrowsError(ErrorKind::kIncomplete, dir + " is not a distributed checkpoint"));
}

TEST(NativeFormatTest, RefusesToOverwriteACommittedCheckpoint) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir);
  EXPECT_THAT(
      [&] { NativeFormat().PrepareDirectory(env, dir, /*overwrite=*/false); },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "refusing to save into " + dir +
                      ": it holds a native checkpoint (metadata.json); a save replaces a committed "
                      "checkpoint "
                      "only when told to (distckpt save --overwrite, SaveOptions::overwrite)"));
  ExpectExample(env, dir, 0);
}

// Issue 39: a committed checkpoint of another format (a PyTorch DCP, a zarr
// store, verl's rank files) is refused too, naming it: native files beside
// it would shadow it. With overwrite it is replaced whole, through staging.
TEST(NativeFormatTest, RefusesToSaveOverAnotherFormatsCheckpoint) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const struct {
    const char* file;
    const char* what;
  } others[] = {
      {".metadata", "a DCP checkpoint (.metadata)"},
      {".zgroup", "a zarr store (.zgroup)"},
      {"zarr.json", "a zarr store (zarr.json)"},
      {"model_world_size_2_rank_0.pt", "a verl FSDP checkpoint (model_world_size_2_rank_0.pt)"}};
  for (const auto& other : others) {
    const std::string dir = JoinPath(tmp.path(), other.file);
    env->CreateDirs(dir);
    WriteFileAtomic(env, JoinPath(dir, other.file), "theirs");
    EXPECT_EQ(CommittedCheckpointIn(env, dir), other.what);
    for (const Format* format : {&NativeFormat(), &FormatByName("dcp")}) {
      EXPECT_THAT([&] { format->PrepareDirectory(env, dir, /*overwrite=*/false); },
                  ThrowsError(ErrorKind::kInvalidArgument,
                              "refusing to save into " + dir + ": it holds " + other.what));
    }
    EXPECT_EQ(ReadFileToString(env, JoinPath(dir, other.file)), "theirs");
    EXPECT_EQ(NativeFormat().PrepareDirectory(env, dir, /*overwrite=*/true), dir + ".staging");
    env->RemoveAll(dir + ".staging");
  }
  // Megatron's own metadata.json beside no .metadata is not a checkpoint.
  const std::string megatron = JoinPath(tmp.path(), "megatron");
  env->CreateDirs(megatron);
  WriteFileAtomic(env, JoinPath(megatron, "metadata.json"), TorchDistConfigText());
  EXPECT_EQ(CommittedCheckpointIn(env, megatron), "");
  EXPECT_EQ(FormatByName("dcp").PrepareDirectory(env, megatron, false), megatron);
}

TEST(NativeFormatTest, OverwriteGoesThroughStaging) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir, /*seed=*/0);
  EXPECT_EQ(NativeFormat().PrepareDirectory(env, dir + "/", true), dir + ".staging");
  SaveExampleCheckpoint(env, dir, /*seed=*/1, /*overwrite=*/true);
  ExpectExample(env, dir, 1);
  EXPECT_EQ(env->ListDir(tmp.path()), std::vector<std::string>{"ckpt"});
}

TEST(NativeFormatTest, FailedOverwriteKeepsTheOldCheckpoint) {
  ScopedTempDir tmp;
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(Env::Default(), dir, /*seed=*/0);
  {
    FaultInjectionEnv full_disk(Env::Default());
    full_disk.FailWritesAfter(100);
    EXPECT_THAT([&] { SaveExampleCheckpoint(&full_disk, dir, 1, /*overwrite=*/true); },
                ThrowsError(ErrorKind::kIo, "No space left on device"));
  }
  ExpectExample(Env::Default(), dir, 0);
  {
    FaultInjectionEnv failing_rename(Env::Default());
    failing_rename.FailRenames(true);  // metadata.json of the staging dir never lands
    EXPECT_THAT([&] { SaveExampleCheckpoint(&failing_rename, dir, 1, true); },
                ThrowsError(ErrorKind::kIo, "rename"));
  }
  ExpectExample(Env::Default(), dir, 0);
  SaveExampleCheckpoint(Env::Default(), dir, 2, true);  // cleans the failed staging dir
  ExpectExample(Env::Default(), dir, 2);
}

// A failed overwrite's staging debris goes with the next save of the
// directory, also one that does not overwrite (the directory was removed).
TEST(NativeFormatTest, NextSaveRemovesUncommittedStagingDebris) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir, 0);
  {
    FaultInjectionEnv full_disk(env);
    full_disk.FailWritesAfter(100);
    EXPECT_THAT([&] { SaveExampleCheckpoint(&full_disk, dir, 1, /*overwrite=*/true); },
                ThrowsError(ErrorKind::kIo, "No space left on device"));
  }
  EXPECT_TRUE(env->IsDirectory(dir + ".staging"));
  env->RemoveAll(dir);
  SaveExampleCheckpoint(env, dir, 2);
  ExpectExample(env, dir, 2);
  EXPECT_FALSE(env->IsDirectory(dir + ".staging"));
}

// A crash between "rename dir -> dir.old" and "rename staging -> dir".
TEST(NativeFormatTest, InterruptedSwapIsFinishedByTheNextSave) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir, 0);
  SaveExampleCheckpoint(env, dir + ".staging", 1);  // a committed staging dir
  env->RenameFile(dir, dir + ".old");
  EXPECT_THAT(
      [&] { NativeFormat().OpenReader(env, dir); },
      ThrowsError(ErrorKind::kIncomplete, "left the new checkpoint in " + dir + ".staging"));
  EXPECT_THAT([&] { NativeFormat().PrepareDirectory(env, dir, false); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "refusing to save into " + dir + ": it holds a native"));
  ExpectExample(env, dir, 1);
  EXPECT_EQ(env->ListDir(tmp.path()), std::vector<std::string>{"ckpt"});
}

TEST(NativeFormatTest, OverwriteRefusesWhenOldDirExists) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  SaveExampleCheckpoint(env, dir, 0);
  env->CreateDirs(dir + ".old");
  EXPECT_THAT([&] { NativeFormat().PrepareDirectory(env, dir, true); },
              ThrowsError(ErrorKind::kInvalidArgument, dir + ".old exists"));
}

TEST(NativeFormatTest, PrepareRemovesOnlyStaleFilesOfOurs) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = JoinPath(tmp.path(), "ckpt");
  env->CreateDirs(dir);
  for (const char* name : {"__0_0.bin", "__12_3.bin", "metadata.json.tmp", "notes.txt", "__x_0.bin",
                           "__0_0.bin.bak", "common.pt"}) {
    WriteFileAtomic(env, JoinPath(dir, name), std::string("stale"));
  }
  EXPECT_EQ(NativeFormat().PrepareDirectory(env, dir, false), dir);
  EXPECT_EQ(env->ListDir(dir),
            (std::vector<std::string>{"__0_0.bin.bak", "__x_0.bin", "common.pt", "notes.txt"}));
  EXPECT_TRUE(IsDataFileName("__3_0.bin"));
  EXPECT_FALSE(IsDataFileName("__3_.bin"));
  EXPECT_EQ(DataFileName(3, 1), "__3_1.bin");
}

TEST(NativeFormatTest, DetectsOnlyNativeMetadata) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = tmp.path();
  EXPECT_FALSE(NativeFormat().Detect(env, dir));
  WriteFileAtomic(
      env, JoinPath(dir, "metadata.json"),
      std::string(R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})"));
  EXPECT_FALSE(NativeFormat().Detect(env, dir));  // Megatron's own metadata.json
  WriteFileAtomic(env, JoinPath(dir, "metadata.json"),
                  std::string(R"({"sharded_backend": "zarr", "sharded_backend_version": 1})"));
  EXPECT_FALSE(NativeFormat().Detect(env, dir));  // Megatron's legacy zarr (format/zarr/)
  WriteFileAtomic(env, JoinPath(dir, "metadata.json"), std::string("{\"format\": \"native\", "));
  EXPECT_TRUE(NativeFormat().Detect(env, dir));  // damaged, but ours: opening reports it
  EXPECT_THAT(
      [&] { NativeFormat().OpenReader(env, dir); },
      ThrowsError(ErrorKind::kCorruption, JoinPath(dir, "metadata.json") + ": not valid JSON"));
  EXPECT_EQ(&FormatByName("native"), &NativeFormat());
  EXPECT_THAT([] { FormatByName("orbax"); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "unknown checkpoint format 'orbax' (known: native, dcp, dcp-1.13, "
                          "dcp-common-pt, fsdp-dtensor, zarr)"));
}

TEST(NativeFormatTest, CommitRejectsForeignMetadata) {
  ScopedTempDir tmp;
  CheckpointMetadata md;
  md.format = "dcp";
  EXPECT_THAT([&] { NativeFormat().Commit(Env::Default(), tmp.path(), tmp.path(), md); },
              ThrowsError(ErrorKind::kInvalidArgument, "cannot commit dcp version 1 metadata"));
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(tmp.path(), "metadata.json")));
}

}  // namespace
}  // namespace distckpt
