// The DCP Format end to end through the Format interface: writers of two
// ranks, Commit, OpenReader; Megatron's layout (metadata.json, common.pt,
// objects, N-D flattened tensors); directory preparation.
#include "format/dcp/dcp_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "format/dcp/dcp_layout.h"
#include "format/dcp/dcp_writer.h"
#include "format/dcp/item_index.h"
#include "format/dcp/megatron_files.h"
#include "format/dcp/testing.h"
#include "format/dcp/torch_save.h"
#include "format/tiles_testing.h"
#include "io/checksum.h"
#include "io/fault_env.h"

namespace distckpt {
namespace {

std::string Iota(DType dtype, int64_t n, int64_t start) {
  std::string out(static_cast<size_t>(n) * DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i)
    StoreFromDouble(out.data(), dtype, static_cast<size_t>(i), double(start + i));
  return out;
}

// Two ranks: "w" f32 (4, 6) in column halves; "flat" f32 (4, 6) as 2 row
// blocks, each flattened over 2 "DP" ranks; object "rng" per rank; common state.
// `iteration` (in the common state) tells two saves apart.
void Save(const std::string& dir, const Format& format, Env* env = Env::Default(),
          bool overwrite = false, int iteration = 42) {
  const std::string write_dir = format.PrepareDirectory(env, dir, overwrite);
  CheckpointMetadata merged;
  merged.format = std::string(format.name());
  merged.topology = "tp=2";
  for (int rank = 0; rank < 2; ++rank) {
    auto w = format.NewWriter(env, write_dir, rank);
    const std::string cols = [&] {  // global (4, 6) iota, columns [3r, 3r+3)
      std::string out;
      for (int64_t row = 0; row < 4; ++row) out += Iota(DType::kF32, 3, row * 6 + 3 * rank);
      return out;
    }();
    w->WriteTensorChunk("w", DType::kF32, {4, 6}, Box{{0, 3 * rank}, {4, 3}}, std::nullopt,
                        Bytes(cols));
    for (int dp = 0; dp < 2; ++dp) {  // row block `rank` (2, 6) flattened: [0, 5) and [5, 12)
      FlatRange f = dp == 0 ? FlatRange{0, 5} : FlatRange{5, 12};
      w->WriteTensorChunk("flat", DType::kF32, {4, 6}, Box{{2 * rank, 0}, {2, 6}}, f,
                          Bytes(Iota(DType::kF32, f.size(), 12 * rank + f.start)));
    }
    const std::string rng = nlohmann::json({{"seed", rank}, {"state", {1, 2, 3}}}).dump();
    w->WriteObject("rng", fmt::format("rng/shard_{}_2", rank), {2}, {rank}, Bytes(rng));
    merged.MergeFrom(w->Finish());
  }
  merged.common = {
      {"iteration", iteration}, {"args", {{"lr", 0.5}}}, {"content_metadata", {{"tag", "t"}}}};
  format.Commit(env, dir, write_dir, merged);
}

TEST(DcpFormatTest, WritesMegatronsTorchDistLayout) {
  ScopedTempDir tmp;
  Save(tmp.path() + "/ck", DcpFormat());
  const std::string dir = tmp.path() + "/ck";
  EXPECT_EQ(Env::Default()->ListDir(dir),
            (std::vector<std::string>{".metadata", "__0_0.distcp", "__1_0.distcp", "common.pt",
                                      "metadata.json"}));
  EXPECT_EQ(MegatronShardedBackend(ReadFileBytes(dir + "/metadata.json")), "torch_dist");
  EXPECT_EQ(
      TorchLoadJson(ZipReader(ReadFileBytes(dir + "/common.pt"), "common.pt")).at("iteration"), 42);

  // .metadata holds the reformulated N-D flattened tensor and its original shape.
  DcpMetadata dcp = DecodeDcpMetadata(ReadFileBytes(dir + "/.metadata"), "md");
  EXPECT_EQ(dcp.target, DcpTarget::kTorch2);
  EXPECT_EQ(dcp.mcore_orig_shapes.at("flat"), (Shape{4, 6}));
  const DcpEntry& flat = *std::find_if(dcp.entries.begin(), dcp.entries.end(),
                                       [](const DcpEntry& e) { return e.fqn == "flat"; });
  EXPECT_EQ(flat.size, (Shape{2, 1, 12}));
  EXPECT_EQ(flat.chunks[3], (DcpChunk{{1, 0, 5}, {1, 1, 7}}));
  EXPECT_EQ(dcp.distckpt_info.at("topology"), "tp=2");
  // Every item's length reaches exactly to the next item.
  for (const DcpStorage& s : dcp.storage) {
    EXPECT_NO_THROW(ZipReader(
        ReadFileBytes(dir + "/" + s.relative_path).substr(s.offset_in_file, s.length), s.fqn));
  }
}

TEST(DcpFormatTest, ReadsBackWhatItWrote) {
  for (DcpTarget target : {DcpTarget::kTorch2, DcpTarget::kTorch113}) {
    ScopedTempDir tmp;
    const std::string dir = tmp.path() + "/ck";
    Save(dir, DcpFormat(target));
    EXPECT_EQ(DetectFormat(Env::Default(), dir).name(), "dcp");
    auto reader = DcpFormat().OpenReader(Env::Default(), dir);
    const CheckpointMetadata& md = reader->metadata();
    EXPECT_EQ(md.topology, "tp=2");
    EXPECT_THAT(md.writer, testing::StartsWith("distckpt"));
    for (const char* key : {"w", "flat"}) {
      SCOPED_TRACE(key);
      const StoredTensor& t = md.tensors.at(key);
      EXPECT_EQ(t.global_shape, (Shape{4, 6}));
      std::vector<std::byte> data = ReadGlobal(*reader, t);
      for (size_t i = 0; i < 24; ++i)
        ASSERT_EQ(LoadAsDouble(data.data(), DType::kF32, i), double(i));
    }
    EXPECT_EQ(md.tensors.at("flat").chunks[3].box, (Box{{2, 0}, {2, 6}}));
    EXPECT_EQ(md.tensors.at("flat").chunks[3].flat, (FlatRange{5, 12}));
    EXPECT_EQ(nlohmann::json::parse(reader->ReadObject(md.objects.at("rng/shard_1_2"))),
              nlohmann::json({{"seed", 1}, {"state", {1, 2, 3}}}));
    EXPECT_EQ(md.objects.at("rng/shard_1_2").global_offset, (Shape{1}));
    EXPECT_EQ(md.common.at("args").at("lr"), 0.5);
    EXPECT_EQ(md.content, nlohmann::json({{"tag", "t"}}));
  }
}

// An object's record (kTorchSaveEncoding) is stored as it is and read back
// byte for byte, with its value; JSON text is pickled as before.
TEST(DcpFormatTest, ObjectRecordsAreStoredAsTheyAre) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  EXPECT_EQ(DcpFormat().ObjectRecordEncoding(), kTorchSaveEncoding);
  PickleWriter p;  // [(1, (2.5, None))]: tuples, which the JSON value makes lists
  p.List(false, [&] {
    p.Tuple(2, [&] {
      p.Int(1);
      p.Tuple(2, [&] {
        p.Float(2.5);
        p.None();
      });
    });
  });
  const std::string pickle = p.Finish();
  const std::string record =
      ZipToString([&](ZipWriter& zip) { zip.AddRecord("data.pkl", pickle); });
  auto w = DcpFormat().NewWriter(env, tmp.path(), 0);
  w->WriteObject("rec", "rec/shard_0_1", {1}, {0}, Bytes(record));
  w->WriteObject("json", "json/shard_0_1", {1}, {0}, Bytes(std::string("[1,[2.5,null]]")));
  const std::string no_pickle = ZipToString([&](ZipWriter& zip) { zip.AddRecord("x", "y"); });
  EXPECT_THAT([&] { w->WriteObject("bad", "bad/shard_0_1", {1}, {0}, Bytes(no_pickle)); },
              ThrowsError(ErrorKind::kCorruption, "object 'bad/shard_0_1': record"));
  CheckpointMetadata md = w->Finish();
  md.format = "dcp";
  DcpFormat().Commit(env, tmp.path(), tmp.path(), md);
  auto reader = DcpFormat().OpenReader(env, tmp.path());
  std::shared_ptr<const ObjectRecord> rec =
      reader->ReadObjectRecord(reader->metadata().objects.at("rec/shard_0_1"));
  EXPECT_EQ(rec->encoding, kTorchSaveEncoding);
  EXPECT_TRUE(rec->bytes == record);
  EXPECT_EQ(rec->value, nlohmann::json({1, {2.5, nullptr}}));
  std::shared_ptr<const ObjectRecord> json =
      reader->ReadObjectRecord(reader->metadata().objects.at("json/shard_0_1"));
  EXPECT_FALSE(json->bytes == record);  // pickled from JSON: lists, not tuples
  EXPECT_EQ(json->value, rec->value);
  EXPECT_EQ(reader->CommonRecord(), nullptr);  // no common_state object
}

TEST(DcpFormatTest, StreamWritersWriteOneFileEach) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  CheckpointMetadata md;
  for (int stream = 0; stream < 2; ++stream) {
    auto w = DcpFormat().NewStreamWriter(env, tmp.path(), 3, stream);
    w->WriteTensorChunk("v", DType::kI64, {4}, Box{{2 * stream}, {2}}, std::nullopt,
                        Bytes(Iota(DType::kI64, 2, 2 * stream)));
    md.MergeFrom(w->Finish());
  }
  md.format = "dcp";
  DcpFormat().Commit(env, tmp.path(), tmp.path(), md);
  auto reader = DcpFormat().OpenReader(env, tmp.path());
  const StoredTensor& v = reader->metadata().tensors.at("v");
  EXPECT_EQ(v.chunks[1].file, "__3_1.distcp");
  EXPECT_EQ(v.chunks[1].writer_rank, 3);
  std::vector<std::byte> data = ReadGlobal(*reader, v);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(LoadAsDouble(data.data(), DType::kI64, i), double(i));
}

TEST(DcpFormatTest, MegatronHeadKeepsCommonStateAsAnObject) {
  // Megatron HEAD writes no common.pt: the common dict is the object common_state/shard_0_1.
  ScopedTempDir tmp;
  Env* env = Env::Default();
  auto w = DcpFormat().NewWriter(env, tmp.path(), 0);
  w->WriteObject("common_state", "common_state/shard_0_1", {1}, {0},
                 Bytes(nlohmann::json({{"iteration", 9}}).dump()));
  CheckpointMetadata md = w->Finish();
  md.format = "dcp";
  DcpFormat().Commit(env, tmp.path(), tmp.path(), md);
  std::filesystem::remove(tmp.path() + "/common.pt");
  auto reader = DcpFormat().OpenReader(env, tmp.path());
  EXPECT_EQ(reader->metadata().common, nlohmann::json({{"iteration", 9}}));
  EXPECT_TRUE(reader->metadata().objects.empty());  // the common dict is not a sharded object
}

// The item index trailer of the data file `file`, and its entries.
DcpIndexTrailer Trailer(const std::string& file) {
  const auto bytes = std::as_bytes(std::span(file.data(), file.size()));
  return *ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), file.size(), "file");
}
std::vector<DcpIndexEntry> IndexEntries(const std::string& file) {
  const auto bytes = std::as_bytes(std::span(file.data(), file.size()));
  const DcpIndexTrailer trailer = Trailer(file);
  return ParseDcpIndexTable(
      bytes.subspan(trailer.table_offset,
                    file.size() - kDcpIndexTrailerBytes - trailer.table_offset),
      trailer, "file");
}

// Two f32 (512, 512) chunks "a" and "b" (iota) in one data file, committed
// (Save); without `index`, the file is cut where its items end, as torch
// writes it. ReadElements reads elements (300, 7) to (300, 10) of one.
class LargeChunksTest : public testing::Test {
 protected:
  void Save(bool index) {
    Env* env = Env::Default();
    auto w = DcpFormat().NewWriter(env, tmp_.path(), 0);
    for (const char* key : {"a", "b"}) {
      w->WriteTensorChunk(key, DType::kF32, {512, 512}, Box{{0, 0}, {512, 512}}, std::nullopt,
                          Bytes(Iota(DType::kF32, 512 * 512, 0)));
    }
    CheckpointMetadata md = w->Finish();
    md.format = "dcp";
    DcpFormat().Commit(env, tmp_.path(), tmp_.path(), md);
    path_ = tmp_.path() + "/" + md.tensors.at("a").chunks[0].file;
    if (!index) {
      const std::string file = ReadFileBytes(path_);
      WriteFileBytes(path_, file.substr(0, Trailer(file).items_end));  // the items alone
    }
    reader_ = DcpFormat().OpenReader(env, tmp_.path());
  }
  // The bytes of the data file's item index table (version 4: its one
  // group of two entries and the directory), which a reader reads once.
  uint64_t TableBytes() const {
    const std::string file = ReadFileBytes(path_);
    return file.size() - kDcpIndexTrailerBytes - Trailer(file).table_offset;
  }
  const StoredTensor& Stored(const char* key) const { return reader_->metadata().tensors.at(key); }
  uint64_t BytesRead() const { return reader_->stats().bytes_read; }
  void ReadElements(const char* key, VerifyPolicy policy) {
    got_[3] = 0;
    reader_->ReadChunk(Stored(key), Stored(key).chunks[0], {&run_, 1}, policy);
    EXPECT_EQ(got_[3], 300 * 512 + 10);
  }
  // Runs across 256 KiB and 1 MiB windows, one covering a whole window (read
  // straight into it); every element must land where it belongs.
  void ReadWindowedRuns(const char* key, VerifyPolicy policy) {
    std::vector<float> dst(512 * 512, -1);
    auto at = [&](uint64_t element) { return reinterpret_cast<std::byte*>(&dst[element]); };
    const ReadRun runs[] = {{4, 100 * 4, at(1)},
                            {200 << 10, 400 << 10, at((200 << 10) / 4)},
                            {900 << 10, 8, at((900 << 10) / 4)}};
    reader_->ReadChunk(Stored(key), Stored(key).chunks[0], runs, policy);
    for (const ReadRun& r : runs) {
      for (uint64_t e = r.offset_in_chunk / 4; e < (r.offset_in_chunk + r.length) / 4; ++e) {
        ASSERT_EQ(dst[e], float(e)) << e;
      }
    }
    EXPECT_EQ(dst[0], -1);
    EXPECT_EQ(dst[(600 << 10) / 4 + 50], -1);
  }
  // Writes `bytes` over the data file, then reads the elements of `key` with
  // `policy` through a fresh reader.
  void ReadAfterDamage(const std::string& bytes, const char* key, VerifyPolicy policy) {
    WriteFileBytes(path_, bytes);
    auto reader = DcpFormat().OpenReader(Env::Default(), tmp_.path());
    const StoredTensor& t = reader->metadata().tensors.at(key);
    reader->ReadChunk(t, t.chunks[0], {&run_, 1}, policy);
  }
  // Where the storage record of `key` starts in the data file `bytes`.
  uint64_t RecordOffset(const std::string& bytes, const char* key) const {
    const uint64_t item = Stored(key).chunks[0].offset;
    ZipReader zip(std::string_view(bytes).substr(item), "item");
    return item + zip.DataOffset(zip.Get("data/0"));
  }

  ScopedTempDir tmp_;
  std::string path_;
  std::unique_ptr<CheckpointReader> reader_;
  float got_[4];
  ReadRun run_{(300 * 512 + 7) * 4, sizeof got_, reinterpret_cast<std::byte*>(got_)};
};

// The readers open at once (a load's ranks) read a data file's index table
// once; each still reads the 40-byte trailer, and a reader opened after
// they closed, or after the file was rewritten, reads the table again.
TEST_F(LargeChunksTest, ReadersOpenAtOnceShareTheIndexTable) {
  Save(true);
  auto read_a = [&](CheckpointReader& reader) {
    const StoredTensor& t = reader.metadata().tensors.at("a");
    got_[3] = 0;
    const uint64_t before = reader.stats().bytes_read;
    reader.ReadChunk(t, t.chunks[0], {&run_, 1}, VerifyPolicy::kNever);
    EXPECT_EQ(got_[3], 300 * 512 + 10);
    return reader.stats().bytes_read - before;
  };
  EXPECT_EQ(read_a(*reader_), 40 + TableBytes() + sizeof got_);
  auto second = DcpFormat().OpenReader(Env::Default(), tmp_.path());
  EXPECT_EQ(read_a(*second), 40 + sizeof got_);
  // Rewritten (same bytes, a later modification time) while both are open.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  WriteFileBytes(path_, ReadFileBytes(path_));
  auto third = DcpFormat().OpenReader(Env::Default(), tmp_.path());
  EXPECT_EQ(read_a(*third), 40 + TableBytes() + sizeof got_);
  reader_.reset();
  second.reset();
  third.reset();
  auto fourth = DcpFormat().OpenReader(Env::Default(), tmp_.path());
  EXPECT_EQ(read_a(*fourth), 40 + TableBytes() + sizeof got_);
}

TEST_F(LargeChunksTest, IndexedItemsReadOnlyTheRunsAndTheirBlocks) {
  Save(true);
  ReadElements("a", VerifyPolicy::kNever);
  // The file's item index once (trailer, directory and the group of the two
  // entries), then the run: no zip header is read.
  EXPECT_EQ(BytesRead(), 40 + TableBytes() + sizeof got_);
  ReadElements("b", VerifyPolicy::kNever);
  EXPECT_EQ(BytesRead(), 40 + TableBytes() + 2 * sizeof got_);
  EXPECT_EQ(reader_->stats().chunks_unverified, 2u);

  // Verified partial reads: the touched tile and, once, the record's tile
  // CRC32s (4 bytes per tile; counted apart from the payload).
  const StoredChunk& b = Stored("b").chunks[0];
  const BlockLayout tiles = BlockLayout::Tiles(Stored("b").global_shape, b.box, std::nullopt,
                                               BlockLayout::Flat::kRows, 4, b.length, 4096);
  uint64_t before = BytesRead();
  ReadElements("b", VerifyPolicy::kWhenWhole);
  EXPECT_EQ(BytesRead(), before + 4096);  // one tile: 16 rows of 64 columns
  EXPECT_EQ(reader_->stats().checksum_bytes_read, tiles.tiles() * 4);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  before = BytesRead();
  ReadWindowedRuns("b", VerifyPolicy::kWhenWhole);
  // (tiles of 16 rows x 64 columns: a run inside a row reads its tiles whole)
  EXPECT_LE(BytesRead(), before + (400 << 10) + 32 * 1024);
  EXPECT_GE(BytesRead(), before + (400 << 10) + 408);
  // kAlways reads the record whole, and the zip headers, which must agree.
  ReadWindowedRuns("b", VerifyPolicy::kAlways);
  EXPECT_EQ(reader_->stats().chunks_verified, 3u);

  // A flipped byte in a touched block fails the read; outside any touched
  // block it is not read (kWhenWhole) but kAlways finds it.
  const std::string good = ReadFileBytes(path_);
  auto flipped = [&](uint64_t at) {
    std::string bad = good;
    bad[at] ^= 1;
    return bad;
  };
  const uint64_t record = RecordOffset(good, "b");
  EXPECT_THAT(
      [&] {
        ReadAfterDamage(flipped(record + run_.offset_in_chunk + 20), "b", VerifyPolicy::kWhenWhole);
      },
      ThrowsError(ErrorKind::kCorruption, "CRC32 mismatch in " + path_ + " for key 'b'"));
  const std::string elsewhere = flipped(record + (700 << 10));
  EXPECT_NO_THROW(ReadAfterDamage(elsewhere, "b", VerifyPolicy::kWhenWhole));
  EXPECT_THAT([&] { ReadAfterDamage(elsewhere, "b", VerifyPolicy::kAlways); },
              ThrowsError(ErrorKind::kCorruption, "CRC32 mismatch in " + path_));
  // A damaged tile CRC32 (b's last tile, not one the run touches) is not
  // read by kWhenWhole; kAlways checks the whole record's CRC32 (index
  // version 3's tile CRCs do not combine into it), which still holds.
  uint64_t items_end;
  std::memcpy(&items_end, good.data() + good.size() - 40, 8);
  const std::string bad_crc =
      flipped(items_end + tiles.tiles() * 4 + (tiles.tiles() - 1) * 4);  // after a's CRCs
  EXPECT_NO_THROW(ReadAfterDamage(bad_crc, "b", VerifyPolicy::kWhenWhole));
  EXPECT_NO_THROW(ReadAfterDamage(bad_crc, "b", VerifyPolicy::kAlways));
  // A trailer claiming more of the file as its table than .metadata has
  // items is not followed: the zip headers serve.
  std::string longer = good;
  auto put = [&](size_t at, uint64_t v) { std::memcpy(longer.data() + at, &v, 8); };
  uint64_t table_offset, count;
  std::memcpy(&table_offset, good.data() + good.size() - 32, 8);
  std::memcpy(&count, good.data() + good.size() - 24, 8);
  put(longer.size() - 32, table_offset - 10 * 64);  // 64-byte entries
  put(longer.size() - 24, count + 10);
  got_[3] = 0;
  EXPECT_NO_THROW(ReadAfterDamage(longer, "a", VerifyPolicy::kWhenWhole));
  EXPECT_EQ(got_[3], 300 * 512 + 10);
  // A damaged index group or directory is refused, naming the file.
  EXPECT_THAT(
      [&] { ReadAfterDamage(flipped(good.size() - 40 - 64 + 3), "a", VerifyPolicy::kNever); },
      ThrowsError(ErrorKind::kCorruption, path_ + " (its item index): item index group 0"));
  EXPECT_THAT(
      [&] { ReadAfterDamage(flipped(good.size() - 40 - 32 + 3), "a", VerifyPolicy::kNever); },
      ThrowsError(ErrorKind::kCorruption, path_ + " (its item index): the item index directory"));
}

// A data file whose item index is of version 3 (distckpt before
// 2026-11-28: one table of 64-byte entries) still loads: partial reads read
// the table whole, then the tiles they touch, each checked.
TEST_F(LargeChunksTest, Version3ItemIndexesStillLoadTileByTile) {
  Save(true);
  const std::string v4 = ReadFileBytes(path_);
  const auto bytes = std::as_bytes(std::span(v4.data(), v4.size()));
  const DcpIndexTrailer trailer = Trailer(v4);
  DcpIndexWriter writer;
  for (DcpIndexEntry e : IndexEntries(v4)) {
    std::vector<uint32_t> crcs =
        ParseDcpBlockCrcs(bytes.subspan(e.crcs_offset, DcpBlockCount(e) * 4));
    writer.Add(e, std::move(crcs));
  }
  const std::string v3 = v4.substr(0, trailer.items_end) + writer.Finish(trailer.items_end, 3);
  ASSERT_EQ(Trailer(v3).version, 3);
  WriteFileBytes(path_, v3);
  reader_ = DcpFormat().OpenReader(Env::Default(), tmp_.path());
  ReadElements("b", VerifyPolicy::kWhenWhole);
  EXPECT_EQ(BytesRead(), 40 + 2 * 64 + 4096);  // trailer, table, one tile
  EXPECT_EQ(TableBytes(), 2u * 64);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  std::string bad = v3;
  bad[RecordOffset(v3, "b") + run_.offset_in_chunk + 20] ^= 1;
  EXPECT_THAT([&] { ReadAfterDamage(bad, "b", VerifyPolicy::kWhenWhole); },
              ThrowsError(ErrorKind::kCorruption, "CRC32 mismatch in " + path_ + " for key 'b'"));
}

// The distributed optimizer's state of a row-parallel weight, f32 (24, 48),
// saved under tp=2 (columns [24r, 24r + 24)), each rank's box flattened over
// two data-parallel ranks at element 250 (mid-row), one data file per rank.
// ReadTp3 reads it as tp=3 reads it (columns [16, 32)) and checks the values.
class FlatStateTest : public testing::Test {
 protected:
  static float Value(int64_t row, int64_t column) { return float(row * 48 + column); }
  void SetUp() override {
    Env* env = Env::Default();
    CheckpointMetadata merged;
    for (int rank = 0; rank < 2; ++rank) {
      auto w = DcpFormat().NewWriter(env, tmp_.path(), rank);
      std::vector<float> box;
      for (int64_t r = 0; r < 24; ++r) {
        for (int64_t c = 0; c < 24; ++c) box.push_back(Value(r, 24 * rank + c));
      }
      for (const FlatRange& f : {FlatRange{0, 250}, FlatRange{250, 576}}) {
        w->WriteTensorChunk(
            "state", DType::kF32, {24, 48}, Box{{0, 24 * rank}, {24, 24}}, f,
            std::as_bytes(std::span(box).subspan(static_cast<size_t>(f.start), f.size())));
      }
      merged.MergeFrom(w->Finish());
    }
    merged.format = "dcp";
    DcpFormat().Commit(env, tmp_.path(), tmp_.path(), merged);
  }
  // Bytes read (payload and index; the tile CRCs are counted apart).
  uint64_t ReadTp3(VerifyPolicy policy) {
    auto reader = DcpFormat().OpenReader(Env::Default(), tmp_.path());
    const StoredTensor& state = reader->metadata().tensors.at("state");
    std::vector<float> out(24 * 16, -1);
    for (const StoredChunk& chunk : state.chunks) {
      reader->ReadChunk(state, chunk,
                        ColumnRunsOf(chunk, 16, 32, 4,
                                     [&](int64_t r, int64_t c) {
                                       return reinterpret_cast<std::byte*>(&out[r * 16 + c - 16]);
                                     }),
                        policy);
    }
    for (int64_t r = 0; r < 24; ++r) {
      for (int64_t c = 0; c < 16; ++c)
        EXPECT_EQ(out[r * 16 + c], Value(r, 16 + c)) << r << "," << c;
    }
    if (policy != VerifyPolicy::kNever) EXPECT_EQ(reader->stats().chunks_verified, 4u);
    return reader->stats().bytes_read;
  }
  // Rank 1's data file, and where element (row, column) of its box's chunk
  // of elements from `start` lies in it.
  std::string RankFile() const { return tmp_.path() + "/__1_0.distcp"; }
  uint64_t At(int64_t start, int64_t row, int64_t column) const {
    auto reader = DcpFormat().OpenReader(Env::Default(), tmp_.path());
    const std::string file = ReadFileBytes(RankFile());
    for (const StoredChunk& c : reader->metadata().tensors.at("state").chunks) {
      if (c.box.offset[1] != 24 || c.flat->start != start) continue;
      for (const DcpIndexEntry& e : IndexEntries(file)) {
        if (e.item_offset == c.offset) return e.data_offset + (row * 24 + column - start) * 4;
      }
    }
    ADD_FAILURE() << start;
    return 0;
  }
  // Reads as tp=3 after flipping a bit of element (row, column) of rank 1's
  // chunk from `start`: refused naming the file and key when `caught`, else
  // read (it is in no tile the read needs); then restores it.
  void ExpectFlip(int64_t start, int64_t row, int64_t column, bool caught) {
    SCOPED_TRACE(testing::Message()
                 << "flat start " << start << " row " << row << " column " << column);
    const std::string good = ReadFileBytes(RankFile());
    std::string bad = good;
    bad[At(start, row, column) + 1] ^= 0x10;
    WriteFileBytes(RankFile(), bad);
    if (caught) {
      EXPECT_THAT([&] { ReadTp3(VerifyPolicy::kWhenWhole); },
                  ThrowsError(ErrorKind::kCorruption,
                              "CRC32 mismatch in " + RankFile() + " for key 'state'"));
    } else {
      EXPECT_NO_THROW(ReadTp3(VerifyPolicy::kWhenWhole));
    }
    WriteFileBytes(RankFile(), good);
  }

  ScopedTempDir tmp_;
};

// Index version 5: a flat item's tiles are its box's rows, so the tp=3 read
// reads exactly the bytes it needs (as many as an unverified read), each
// verified: a flipped byte in a partly read tile (of a partial first or last
// row, or a whole one) is refused naming the file and key.
TEST_F(FlatStateTest, ColumnReshardReadsAndVerifiesExactlyItsBytes) {
  const uint64_t exact = ReadTp3(VerifyPolicy::kNever);
  EXPECT_EQ(ReadTp3(VerifyPolicy::kWhenWhole), exact);
  EXPECT_EQ(Trailer(ReadFileBytes(RankFile())).version, 5);
  // Rank 1's chunks hold columns [24, 48), of which [24, 32) are needed:
  // elements [0, 250) end in row 10 at column 10, [250, 576) start there.
  ExpectFlip(0, 10, 4, true);  // the partial last row
  ExpectFlip(0, 10, 9, false);
  ExpectFlip(250, 10, 10, false);  // the partial first row: nothing needed
  ExpectFlip(250, 12, 3, true);
  ExpectFlip(250, 12, 9, false);
  ExpectFlip(250, 23, 7, true);
}

// Index version 4 (distckpt until 2026-11-28): the same bytes but a flat
// item's CRCs are of uniform blocks. Such a file still loads, verified as
// it was written (reading whole blocks: more than it needs), and a flipped
// byte is still refused.
TEST_F(FlatStateTest, Version4ItemIndexesKeepUniformBlocksForFlatItems) {
  const uint64_t exact = ReadTp3(VerifyPolicy::kNever);
  for (const std::string path : {tmp_.path() + "/__0_0.distcp", RankFile()}) {
    const std::string v5 = ReadFileBytes(path);
    const auto bytes = std::as_bytes(std::span(v5.data(), v5.size()));
    const DcpIndexTrailer trailer = Trailer(v5);
    DcpIndexWriter writer;
    for (DcpIndexEntry e : IndexEntries(v5)) {
      ASSERT_TRUE(e.flat_rows);
      const BlockLayout uniform = BlockLayout::Uniform(e.data_size, e.block_size);
      e.tiles = uniform.tiles();
      writer.Add(e, DcpTileCrcs(uniform, bytes.subspan(e.data_offset, e.data_size)));
    }
    const std::string v4 = v5.substr(0, trailer.items_end) + writer.Finish(trailer.items_end, 4);
    ASSERT_EQ(Trailer(v4).version, 4);
    WriteFileBytes(path, v4);
  }
  EXPECT_EQ(ReadTp3(VerifyPolicy::kNever), exact);
  EXPECT_GT(ReadTp3(VerifyPolicy::kWhenWhole), exact);
  ExpectFlip(0, 10, 4, true);
  ExpectFlip(250, 12, 3, true);
  ExpectFlip(250, 23, 7, true);
}

// A data file without an item index (written by torch, or by distckpt
// before it had one): its items' zip headers say where the data lies.
TEST_F(LargeChunksTest, ZipItemsReadOnlyTheRunsPlusHeadAndTail) {
  Save(false);
  ReadElements("a", VerifyPolicy::kNever);
  // A look for an index (40 bytes), then the first item of the file: a
  // 512-byte head and tail, then the run.
  EXPECT_EQ(BytesRead(), 40 + 512 + 512 + sizeof got_);
  EXPECT_EQ(reader_->stats().chunks_unverified, 1u);

  // The next item of the file: exactly the head and tail the first one needed.
  const std::string items = ReadFileBytes(path_);
  ZipReader zip(std::string_view(items).substr(0, Stored("b").chunks[0].offset),
                "a's item, laid out as b's");
  const uint64_t edges = zip.Get("data/0").header_offset + 30 + zip.size() - zip.directory_offset();
  EXPECT_LT(edges, 700u);
  ReadElements("b", VerifyPolicy::kNever);
  EXPECT_EQ(BytesRead(), 40 + 1024 + edges + 2 * sizeof got_);

  // Verified reads (the default kWhenWhole, and kAlways) read the record
  // whole: CRC checked.
  const uint64_t before = BytesRead();
  ReadElements("b", VerifyPolicy::kWhenWhole);
  EXPECT_EQ(BytesRead(), before + 512 * 512 * 4);
  EXPECT_EQ(reader_->stats().chunks_verified, 1u);
  ReadWindowedRuns("b", VerifyPolicy::kWhenWhole);
  ReadWindowedRuns("b", VerifyPolicy::kAlways);
  EXPECT_EQ(reader_->stats().chunks_verified, 3u);

  // A flipped byte outside the runs still fails the verified partial read.
  std::string bad = items;
  bad[RecordOffset(items, "b") + (700 << 10)] ^= 1;
  EXPECT_THAT([&] { ReadAfterDamage(bad, "b", VerifyPolicy::kWhenWhole); },
              ThrowsError(ErrorKind::kCorruption, "CRC32 mismatch in " + path_));
}

// ReadChunks of whole records lying near one another (a rank's items as it
// wrote them) shares system calls, with exactly the bytes, verification,
// errors and (but for the gaps read between records) stats of ReadChunk of
// each: records from 8 to 96 KiB written together (hashed ahead), one past
// 256 KiB and one small enough to be held in memory (both read alone).
TEST(DcpFormatTest, BatchedReadsOfNearbyRecordsEqualReadsOfEach) {
  ScopedTempDir tmp;
  std::vector<std::string> keys, payloads;
  for (int64_t elements : {2048, 24576, 4096, 16384, 200, 8192, 100000, 12288, 2048, 16384}) {
    keys.push_back(fmt::format("t{}", keys.size()));
    payloads.push_back(Iota(DType::kF32, elements, 7 * static_cast<int64_t>(keys.size())));
  }
  {
    auto w = DcpFormat().NewWriter(Env::Default(), tmp.path(), 0);
    w->SetHelpers(1);
    std::vector<Shape> shapes;
    std::vector<ChunkToWrite> chunks;
    for (size_t i = 0; i < keys.size(); ++i) shapes.push_back({int64_t(payloads[i].size() / 4)});
    for (size_t i = 0; i < keys.size(); ++i) {
      chunks.push_back({&keys[i], DType::kF32, &shapes[i], Box{{0}, shapes[i]}, std::nullopt,
                        Bytes(payloads[i])});
    }
    w->WriteTensorChunks(chunks);
    CheckpointMetadata md = w->Finish();
    md.format = "dcp";
    DcpFormat().Commit(Env::Default(), tmp.path(), tmp.path(), md);
  }
  struct Outcome {
    std::vector<std::string> bytes;
    uint64_t bytes_read = 0, verified = 0, unverified = 0, gathered = 0;
    std::string error;
  };
  auto read = [&](bool batched, VerifyPolicy policy) {
    GatherCountingEnv env(Env::Default());
    std::unique_ptr<CheckpointReader> reader = DcpFormat().OpenReader(&env, tmp.path());
    Outcome out;
    out.bytes.resize(keys.size());
    std::vector<ReadRun> whole(keys.size());
    std::vector<ChunkRead> reads;
    for (size_t i = 0; i < keys.size(); ++i) {
      const StoredTensor& t = reader->metadata().tensors.at(keys[i]);
      out.bytes[i].assign(payloads[i].size(), '\0');
      whole[i] = {0, payloads[i].size(), reinterpret_cast<std::byte*>(out.bytes[i].data())};
      reads.push_back({&t, &t.chunks[0], std::span(&whole[i], 1)});
    }
    const uint64_t opened = reader->stats().bytes_read;
    try {
      if (batched) {
        reader->ReadChunks(reads, policy);
      } else {
        for (const ChunkRead& r : reads) reader->ReadChunk(*r.tensor, *r.chunk, r.runs, policy);
      }
    } catch (const CheckpointError& e) {
      out.error = e.what();
    }
    out.bytes_read = reader->stats().bytes_read - opened;
    out.verified = reader->stats().chunks_verified;
    out.unverified = reader->stats().chunks_unverified;
    out.gathered = env.gathered();
    return out;
  };
  for (VerifyPolicy policy : {VerifyPolicy::kWhenWhole, VerifyPolicy::kNever}) {
    const Outcome each = read(false, policy), batched = read(true, policy);
    EXPECT_EQ(batched.error, "");
    EXPECT_EQ(each.error, "");
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(batched.bytes[i] == payloads[i]) << keys[i];
      EXPECT_TRUE(each.bytes[i] == payloads[i]) << keys[i];
    }
    EXPECT_EQ(batched.verified, each.verified);
    EXPECT_EQ(batched.unverified, each.unverified);
    EXPECT_EQ(batched.verified + batched.unverified, keys.size());
    // Two groups (the 400 KiB record between them is read alone), gathered
    // reads only; the gaps between records are a few hundred bytes each.
    EXPECT_EQ(each.gathered, 0u);
    EXPECT_EQ(batched.gathered, 2u);
    EXPECT_GE(batched.bytes_read, each.bytes_read);
    EXPECT_LE(batched.bytes_read, each.bytes_read + 8 * 4096);
  }
  // Damage: a byte of each record flipped (first, middle, last): the same
  // error, naming the same item. (A file cut short fails at open: every item
  // must lie inside its file.)
  const std::string path = JoinPath(tmp.path(), "__0_0.distcp");
  const std::string original = ReadFileBytes(path);
  GatherCountingEnv env(Env::Default());
  auto reader = DcpFormat().OpenReader(&env, tmp.path());
  int damaged = 0;
  for (const std::string& key : keys) {
    const StoredChunk& c = reader->metadata().tensors.at(key).chunks[0];
    const size_t record =
        original.find(std::string_view(payloads[&key - keys.data()]).substr(0, 64), c.offset);
    ASSERT_NE(record, std::string::npos) << key;
    for (uint64_t at : {uint64_t{0}, c.length / 2, c.length - 1}) {
      std::string bytes = original;
      bytes[record + at] ^= 0x20;
      WriteFileBytes(path, bytes);
      const Outcome each = read(false, VerifyPolicy::kWhenWhole);
      EXPECT_THAT(each.error, testing::HasSubstr("checksum mismatch in " + path))
          << key << " " << at;
      EXPECT_EQ(read(true, VerifyPolicy::kWhenWhole).error, each.error) << key << " " << at;
      ++damaged;
    }
  }
  WriteFileBytes(path, original);
  EXPECT_EQ(damaged, 30);
}

// A data file whose item index is of version 1 (distckpt before 2026-11-27:
// no record hash) still loads, its whole records checked by their CRC32.
TEST(DcpFormatTest, Version1ItemIndexesLoadAndVerifyByCrc32) {
  ScopedTempDir tmp;
  const std::string payload = Iota(DType::kF32, 8192, 3);
  {
    auto w = DcpFormat().NewWriter(Env::Default(), tmp.path(), 0);
    w->WriteTensorChunk("t", DType::kF32, {8192}, Box{{0}, {8192}}, std::nullopt, Bytes(payload));
    CheckpointMetadata md = w->Finish();
    md.format = "dcp";
    DcpFormat().Commit(Env::Default(), tmp.path(), tmp.path(), md);
  }
  // Rewrite the index as version 1: the same block CRCs, 48-byte entries.
  const std::string path = JoinPath(tmp.path(), "__0_0.distcp");
  std::string file = ReadFileBytes(path);
  const auto bytes = std::as_bytes(std::span(file.data(), file.size()));
  const DcpIndexTrailer trailer =
      *ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), file.size(), path);
  ASSERT_EQ(trailer.version, kDcpIndexVersion);
  const std::vector<DcpIndexEntry> entries =
      ParseDcpIndexTable(bytes.subspan(trailer.table_offset,
                                       file.size() - kDcpIndexTrailerBytes - trailer.table_offset),
                         trailer, path);
  ASSERT_EQ(entries.size(), 1u);
  ASSERT_TRUE(entries[0].hash.has_value());
  auto put = [](std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string table;
  for (uint64_t v : {entries[0].item_offset, entries[0].data_offset, entries[0].data_size,
                     entries[0].binding, entries[0].crcs_offset})
    put(table, v, 8);
  put(table, entries[0].crc, 4);
  put(table, entries[0].block_size, 4);
  std::string v1 = file.substr(0, trailer.table_offset) + table;
  put(v1, trailer.items_end, 8);
  put(v1, trailer.table_offset, 8);
  put(v1, 1, 8);
  put(v1, Checksum(std::as_bytes(std::span(table.data(), table.size()))), 8);
  v1 += "DCPINDX1";
  WriteFileBytes(path, v1);

  auto load = [&] {
    auto reader = DcpFormat().OpenReader(Env::Default(), tmp.path());
    const StoredTensor& t = reader->metadata().tensors.at("t");
    std::string got(payload.size(), '\0');
    const ReadRun run{0, got.size(), reinterpret_cast<std::byte*>(got.data())};
    reader->ReadChunk(t, t.chunks[0], {&run, 1}, VerifyPolicy::kWhenWhole);
    EXPECT_EQ(reader->stats().chunks_verified, 1u);
    return got;
  };
  EXPECT_TRUE(load() == payload);
  v1[entries[0].data_offset + 1000] ^= 1;
  WriteFileBytes(path, v1);
  EXPECT_THAT(load, ThrowsError(ErrorKind::kCorruption, "CRC32 mismatch in " + path));
}

TEST(DcpFormatTest, StridedItemsAreReadWholeAndGathered) {
  // A (3, 2) chunk stored as torch keeps a transposed view: storage [0..5] of a
  // (2, 3) tensor, stride (1, 3). Elements in row-major order: 0 3 1 4 2 5.
  ScopedTempDir tmp;
  const std::string pickle = RebuildTensorPickle(6, 0, {3, 2}, {1, 3}),
                    storage = Iota(DType::kF32, 6, 0);
  const std::string item = ZipToString([&](ZipWriter& zip) {
    zip.AddRecord("data.pkl", pickle);
    zip.AddRecord("data/0", storage);
    zip.AddRecord("version", "3\n");
  });
  WriteFileBytes(tmp.path() + "/__0_0.distcp", item);
  DcpMetadata md;
  md.entries = {{"t", false, DType::kF32, {3, 2}, {{{0, 0}, {3, 2}}}}};
  md.storage = {{"t", Shape{0, 0}, 0, "__0_0.distcp", 0, item.size(), {}}};
  WriteFileBytes(tmp.path() + "/.metadata", EncodeDcpMetadata(md));
  auto reader = DcpFormat().OpenReader(Env::Default(), tmp.path());
  float got[2];
  ReadRun run{2 * 4, sizeof got, reinterpret_cast<std::byte*>(got)};  // row 1
  reader->ReadChunk(reader->metadata().tensors.at("t"),
                    reader->metadata().tensors.at("t").chunks[0], {&run, 1},
                    VerifyPolicy::kWhenWhole);
  EXPECT_THAT(got, testing::ElementsAre(1, 4));
  EXPECT_EQ(reader->stats().bytes_read,
            item.size());  // a small item: one read, records from memory
  EXPECT_EQ(reader->stats().chunks_verified, 1u);
}

// Both ranks hold the shard of a tensor of no elements and write an item for
// it; rank 1 writes it after an item of "w". The checkpoint stores one empty
// chunk (rank 0's), and "w"'s item still ends where rank 1's empty item
// starts (found by the DCP property: it used to extend to the end of the
// file, so the zip reader found the empty item's directory instead).
TEST(DcpFormatTest, DuplicateEmptyItemsDoNotExtendTheItemBefore) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = tmp.path() + "/ck";
  const std::string write_dir = DcpFormat().PrepareDirectory(env, dir, false);
  CheckpointMetadata merged;
  merged.format = "dcp";
  for (int rank = 0; rank < 2; ++rank) {
    auto w = DcpFormat().NewWriter(env, write_dir, rank);
    if (rank == 1)
      w->WriteTensorChunk("w", DType::kF32, {4}, Box{{0}, {4}}, std::nullopt,
                          Bytes(Iota(DType::kF32, 4, 0)));
    w->WriteTensorChunk("z", DType::kF32, {0}, Box{{0}, {0}}, std::nullopt, {});
    merged.MergeFrom(w->Finish());
  }
  DcpFormat().Commit(env, dir, write_dir, merged);
  auto reader = DcpFormat().OpenReader(env, dir);
  const CheckpointMetadata& md = reader->metadata();
  ASSERT_EQ(md.tensors.at("z").chunks.size(), 1u);
  EXPECT_EQ(md.tensors.at("z").chunks[0].file, "__0_0.distcp");
  std::vector<std::byte> data = ReadGlobal(*reader, md.tensors.at("w"));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(LoadAsDouble(data.data(), DType::kF32, i), double(i));
}

// storage_data entries that share or overlap an item are damage (found by the
// DCP corruption property: one changed offset made an object load another
// object's bytes item, which DCP does not checksum).
TEST(DcpFormatTest, StorageEntriesSharingOrOverlappingAnItemAreCorruption) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  Save(dir, DcpFormat());
  const DcpMetadata good =
      DecodeDcpMetadata(ReadFileToString(Env::Default(), dir + "/.metadata"), "m");
  EXPECT_NO_THROW(LayoutFromDcp(good, "m"));
  // Two entries of rank 0's file: the second made to start where the first does, then inside it.
  std::vector<size_t> in_file0;
  for (size_t i = 0; i < good.storage.size(); ++i) {
    if (good.storage[i].relative_path == "__0_0.distcp") in_file0.push_back(i);
  }
  ASSERT_GE(in_file0.size(), 2u);
  DcpMetadata same = good, inside = good;
  const DcpStorage& first = good.storage[in_file0[0]];
  same.storage[in_file0[1]].offset_in_file = first.offset_in_file;
  EXPECT_THAT([&] { LayoutFromDcp(same, "m"); },
              ThrowsError(ErrorKind::kCorruption, "both start at byte"));
  inside.storage[in_file0[1]].offset_in_file = first.offset_in_file + 1;
  EXPECT_THAT([&] { LayoutFromDcp(inside, "m"); }, ThrowsError(ErrorKind::kCorruption, "overlaps"));
}

TEST(DcpFormatTest, FlattenedChunksOffAGridAreUnsupported) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  auto w = DcpFormat().NewWriter(env, tmp.path(), 0);
  w->WriteTensorChunk("f", DType::kF32, {5}, Box{{0}, {3}}, FlatRange{0, 3},
                      Bytes(Iota(DType::kF32, 3, 0)));
  w->WriteTensorChunk("f", DType::kF32, {5}, Box{{3}, {2}}, FlatRange{0, 2},
                      Bytes(Iota(DType::kF32, 2, 3)));
  CheckpointMetadata md = w->Finish();
  md.format = "dcp";
  EXPECT_THAT([&] { DcpFormat().Commit(env, tmp.path(), tmp.path(), md); },
              ThrowsError(ErrorKind::kUnsupported, "regular grid"));
  EXPECT_FALSE(DcpFormat().Detect(env, tmp.path()));
}

TEST(DcpFormatTest, WriterRefusesBadChunks) {
  ScopedTempDir tmp;
  auto w = DcpFormat().NewWriter(Env::Default(), tmp.path(), 0);
  EXPECT_THAT(
      [&] {
        w->WriteTensorChunk("a", DType::kF32, {4}, Box{{2}, {3}}, std::nullopt,
                            Bytes(Iota(DType::kF32, 3, 0)));
      },
      ThrowsError(ErrorKind::kInvalidArgument, "lies outside its global shape (4,)"));
  EXPECT_THAT(
      [&] {
        w->WriteTensorChunk("a", DType::kF32, {4}, Box{{0}, {2}}, std::nullopt,
                            Bytes(Iota(DType::kF32, 3, 0)));
      },
      ThrowsError(ErrorKind::kInvalidArgument, "got 12 bytes, but 2 elements of f32 take 8"));
  w->WriteTensorChunk("a", DType::kF32, {4}, Box{{0}, {2}}, std::nullopt,
                      Bytes(Iota(DType::kF32, 2, 0)));
  EXPECT_THAT(
      [&] {
        w->WriteTensorChunk("a", DType::kF64, {4}, Box{{2}, {2}}, std::nullopt,
                            Bytes(Iota(DType::kF64, 2, 0)));
      },
      ThrowsError(ErrorKind::kShapeMismatch, "'a'"));
  EXPECT_THAT([&] { w->WriteObject("o", "o/shard_0_1", {1}, {0}, Bytes(std::string("{oops"))); },
              ThrowsError(ErrorKind::kInvalidArgument, "not JSON"));
}

TEST(DcpFormatTest, PrepareDirectoryProtectsCommittedCheckpoints) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = tmp.path() + "/ck";
  Save(dir, DcpFormat());
  EXPECT_THAT(
      [&] { DcpFormat().PrepareDirectory(env, dir, false); },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "refusing to save into " + dir + ": it holds a DCP checkpoint (.metadata)"));
  EXPECT_EQ(DcpFormat().PrepareDirectory(env, dir + "/", true), dir + ".staging");

  // An uncommitted save's files go; the user's stay.
  const std::string stale = tmp.path() + "/stale";
  CopyDir(dir, stale);
  std::filesystem::remove(stale + "/.metadata");
  WriteFileBytes(stale + "/notes.txt", "mine");
  EXPECT_EQ(DcpFormat().PrepareDirectory(env, stale, false), stale);
  EXPECT_EQ(env->ListDir(stale), std::vector<std::string>{"notes.txt"});
  EXPECT_TRUE(IsDcpDataFileName("__12_3.distcp"));
  for (const char* name : {"__1_.distcp", "__1_0.bin", "__+1_0.distcp", "__1_0.distcp.bak"}) {
    EXPECT_FALSE(IsDcpDataFileName(name)) << name;
  }

  // A native checkpoint's metadata.json is not Megatron's: refused, not removed.
  const std::string native = tmp.path() + "/native";
  std::filesystem::create_directories(native);
  WriteFileBytes(native + "/metadata.json", R"({"format": "native", "format_version": 1})");
  EXPECT_THAT([&] { DcpFormat().PrepareDirectory(env, native, false); },
              ThrowsError(ErrorKind::kInvalidArgument, "another format"));
}

int Iteration(const std::string& dir) {
  return DcpFormat().OpenReader(Env::Default(), dir)->metadata().common.at("iteration").get<int>();
}

// Overwrite stages the new checkpoint beside the old one and swaps it in at
// commit (staged_overwrite.h): a failed save keeps the previous checkpoint.
// .metadata is parsed once per text (format/metadata_cache.h): a reopen of
// the same checkpoint reads the same layout, and .metadata damaged after an
// open is parsed again and refused, never served from the earlier parse.
TEST(DcpFormatTest, ReopenAfterTheMetadataChangedParsesItAgain) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = tmp.path() + "/ck";
  Save(dir, DcpFormat());
  const auto first = DcpFormat().OpenReader(env, dir);
  const auto again = DcpFormat().OpenReader(env, dir);
  EXPECT_EQ(again->metadata().Keys(), first->metadata().Keys());
  EXPECT_EQ(again->metadata().common, first->metadata().common);
  DcpMetadata damaged = DecodeDcpMetadata(ReadFileToString(env, dir + "/.metadata"), "m");
  std::vector<size_t> in_file0;
  for (size_t i = 0; i < damaged.storage.size(); ++i) {
    if (damaged.storage[i].relative_path == "__0_0.distcp") in_file0.push_back(i);
  }
  ASSERT_GE(in_file0.size(), 2u);
  damaged.storage[in_file0[1]].offset_in_file = damaged.storage[in_file0[0]].offset_in_file;
  WriteFileAtomic(env, dir + "/.metadata", EncodeDcpMetadata(damaged));
  EXPECT_THAT([&] { DcpFormat().OpenReader(env, dir); },
              ThrowsError(ErrorKind::kCorruption, "both start at byte"));
}

TEST(DcpFormatTest, OverwriteIsAtomicAndKeepsTheOldCheckpointOnFailure) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  const std::string dir = tmp.path() + "/ck";
  Save(dir, DcpFormat(), env, false, 1);
  Save(dir, DcpFormat(), env, true, 2);
  EXPECT_EQ(Iteration(dir), 2);
  EXPECT_EQ(env->ListDir(tmp.path()), std::vector<std::string>{"ck"});
  {
    FaultInjectionEnv full_disk(env);
    full_disk.FailWritesAfter(300);
    EXPECT_THAT([&] { Save(dir, DcpFormat(), &full_disk, true, 3); },
                ThrowsError(ErrorKind::kIo, "No space left on device"));
  }
  EXPECT_EQ(Iteration(dir), 2);
  {
    FaultInjectionEnv failing_rename(env);
    failing_rename.FailRenames(true);  // .metadata of the staging dir never lands
    EXPECT_THAT([&] { Save(dir, DcpFormat(), &failing_rename, true, 3); },
                ThrowsError(ErrorKind::kIo, "rename"));
  }
  EXPECT_EQ(Iteration(dir), 2);
  // A crash between "rename ck -> ck.old" and "rename ck.staging -> ck".
  Save(dir + ".staging", DcpFormat(), env, false, 4);
  env->RenameFile(dir, dir + ".old");
  EXPECT_THAT(
      [&] { DcpFormat().OpenReader(env, dir); },
      ThrowsError(ErrorKind::kIncomplete, "left the new checkpoint in " + dir + ".staging"));
  Save(dir, DcpFormat(), env, true, 5);  // finishes the swap, then overwrites
  EXPECT_EQ(Iteration(dir), 5);
  EXPECT_EQ(env->ListDir(tmp.path()), std::vector<std::string>{"ck"});
}

TEST(DcpFormatTest, OpenRefusesIncompleteAndForeignCheckpoints) {
  ScopedTempDir tmp;
  Env* env = Env::Default();
  EXPECT_THAT([&] { DcpFormat().OpenReader(env, tmp.path() + "/none"); },
              ThrowsError(ErrorKind::kIncomplete));
  EXPECT_THAT([&] { DcpFormat().OpenReader(env, tmp.path()); },
              ThrowsError(ErrorKind::kIncomplete, ".metadata missing"));
  const std::string dir = tmp.path() + "/zarr";
  CopyDir(DcpFixture("raw-stdlib/target-2.x"), dir);
  WriteFileBytes(dir + "/metadata.json",
                 R"({"sharded_backend": "zarr", "sharded_backend_version": 1})");
  EXPECT_THAT([&] { DcpFormat().OpenReader(env, dir); },
              ThrowsError(ErrorKind::kUnsupported, "'zarr'"));
}

TEST(DcpLayoutTest, RefusesPathsOutsideTheDirectory) {
  DcpMetadata md =
      DecodeDcpMetadata(ReadFileBytes(DcpFixture("raw-stdlib/target-2.x/.metadata")), "md");
  for (const char* path : {"../secret", "/etc/passwd", "a/b.distcp", ""}) {
    md.storage[1].relative_path = path;
    EXPECT_THAT([&] { LayoutFromDcp(md, "md"); },
                ThrowsError(ErrorKind::kCorruption, "not a plain file name"));
  }
  EXPECT_EQ(DcpFileRank("__12_3.distcp"), 12);
  EXPECT_EQ(DcpFileRank("hint__7_0.distcp"), 7);
  EXPECT_EQ(DcpFileRank("weird.bin"), 0);
}

}  // namespace
}  // namespace distckpt
