// ZarrReader on hand-made Megatron zarr checkpoints (edge chunks, nested
// keys, scalars) and on hostile ones: every failure names the file, nothing
// outside the checkpoint is read; and on fixtures/megatron-zarr, written by
// Megatron-Core 0.15's own zarr save.
#include "format/zarr/zarr_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error_testing.h"
#include "format/dcp/testing.h"
#include "format/dcp/torch_save.h"
#include "format/zarr/zarr_format.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// A Megatron zarr checkpoint: metadata.json, common.pt, arrays added by Array().
class ZarrDir {
 public:
  explicit ZarrDir(std::string dir) : dir_(std::move(dir)) {
    fs::create_directories(dir_);
    WriteFileBytes(dir_ + "/metadata.json",
                   R"({"sharded_backend": "zarr", "sharded_backend_version": 1, )"
                   R"("common_backend": "torch", "common_backend_version": 1})");
    WriteFileBytes(dir_ + "/common.pt", TorchSaveJson({{"iteration", 3}}));
  }
  const std::string& dir() const { return dir_; }

  // A float32 array whose element i (row-major) is i; chunk files hold
  // whole cells, the padding past the shape 0xEE bytes.
  void Array(const std::string& key, const Shape& shape, const Shape& chunks) {
    const std::string d = dir_ + "/" + key;
    fs::create_directories(d);
    nlohmann::json z = {{"chunks", chunks},      {"compressor", nullptr}, {"dtype", "<f4"},
                        {"fill_value", nullptr}, {"filters", nullptr},    {"order", "C"},
                        {"shape", shape},        {"zarr_format", 2}};
    WriteFileBytes(d + "/.zarray", z.dump(4));
    ZarrArray a = ParseZarray(z.dump(), d);
    const Shape grid = a.GridShape();
    Shape index(grid.size(), 0);
    for (uint64_t n = 0; n < a.NumChunks(); ++n) {
      std::string bytes(a.ChunkFileBytes(), '\xEE');
      const Box cell{a.ChunkBox(index).offset, chunks};
      // Element by element: the cell's row-major index -> the array's.
      for (int64_t e = 0; e < Volume(chunks); ++e) {
        int64_t rem = e, global = 0, stride = 1;
        bool inside = true;
        Shape coord(chunks.size());
        for (size_t ax = chunks.size(); ax-- > 0;) {
          coord[ax] = cell.offset[ax] + rem % chunks[ax];
          rem /= chunks[ax];
          inside = inside && coord[ax] < shape[ax];
        }
        if (!inside) continue;
        for (size_t ax = shape.size(); ax-- > 0;) {
          global += coord[ax] * stride;
          stride *= shape[ax];
        }
        const float v = static_cast<float>(global);
        std::memcpy(bytes.data() + e * 4, &v, 4);
      }
      WriteFileBytes(d + "/" + ZarrArray::ChunkKey(index), bytes);
      for (size_t ax = grid.size(); ax-- > 0;) {
        if (++index[ax] < grid[ax]) break;
        index[ax] = 0;
      }
    }
  }

 private:
  std::string dir_;
};

std::unique_ptr<CheckpointReader> Open(const std::string& dir) {
  return DetectFormat(Env::Default(), dir).OpenReader(Env::Default(), dir);
}

void ExpectIota(CheckpointReader& reader, const std::string& key) {
  const StoredTensor& t = reader.metadata().tensors.at(key);
  const std::vector<std::byte> data = ReadGlobal(reader, t);
  for (int64_t i = 0; i < Volume(t.global_shape); ++i) {
    float v;
    std::memcpy(&v, data.data() + i * 4, 4);
    ASSERT_EQ(v, static_cast<float>(i)) << key << " element " << i;
  }
}

TEST(ZarrReaderTest, ReadsEdgeChunksNestedKeysAndScalars) {
  ScopedTempDir tmp;
  ZarrDir ck(tmp.path() + "/ck");
  ck.Array("w", {5, 3}, {2, 3});        // last chunk clipped: rows past 5 are padding
  ck.Array("m", {7, 5, 3}, {3, 2, 2});  // edges on every axis
  ck.Array("opt/state/v", {4}, {4});    // a key with '/': nested directories
  ck.Array("s", {}, {});                // a scalar: chunk file "0"
  ck.Array("e", {0, 4}, {1, 4});        // no elements, no chunk files
  EXPECT_EQ(DetectFormat(Env::Default(), ck.dir()).name(), "zarr");
  auto reader = Open(ck.dir());
  const CheckpointMetadata& md = reader->metadata();
  EXPECT_EQ(md.format, "zarr");
  EXPECT_EQ(md.common, nlohmann::json({{"iteration", 3}}));
  ASSERT_EQ(md.tensors.size(), 5u);
  EXPECT_EQ(md.tensors.at("w").chunks.size(), 3u);
  EXPECT_EQ(md.tensors.at("w").chunks[2].box, (Box{{4, 0}, {1, 3}}));
  EXPECT_EQ(md.tensors.at("w").chunks[2].file, "w/2.0");
  EXPECT_FALSE(md.tensors.at("w").chunks[2].checksum.has_value());
  for (const char* key : {"w", "m", "opt/state/v", "s", "e"}) ExpectIota(*reader, key);
  // Partial runs of an edge chunk: row 1 of chunk (2, 2, 1) of "m" (box [6:7, 4:5, 2:3]).
  const StoredTensor& m = md.tensors.at("m");
  const StoredChunk* edge = nullptr;
  for (const StoredChunk& c : m.chunks) {
    if (c.file == "m/2.2.1") edge = &c;
  }
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(edge->box, (Box{{6, 4, 2}, {1, 1, 1}}));
  float v = 0;
  ReadRun run{0, 4, reinterpret_cast<std::byte*>(&v)};
  reader->ReadChunk(m, *edge, {&run, 1}, VerifyPolicy::kAlways);
  EXPECT_EQ(v, static_cast<float>(6 * 15 + 4 * 3 + 2));
  EXPECT_GT(reader->stats().chunks_unverified.load(), 0u);
  // A chunk that is not one of the array's (a forged file name, a box off the grid) is
  // refused: the file read is named from the grid, never taken from the caller.
  StoredChunk forged = *edge;
  forged.file = "../../outside/0";
  EXPECT_THAT(
      [&] {
        reader->ReadChunk(m, forged, {&run, 1}, VerifyPolicy::kNever);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "stores no chunk"));
  forged = *edge;
  forged.box.offset[0] = 5;
  EXPECT_THAT(
      [&] {
        reader->ReadChunk(m, forged, {&run, 1}, VerifyPolicy::kNever);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "stores no chunk"));
  EXPECT_EQ(reader->stats().chunks_verified.load(), 0u);  // zarr has no checksums
}

TEST(ZarrReaderTest, MissingTruncatedOrOversizedChunkFilesAreNamed) {
  ScopedTempDir tmp;
  ZarrDir ck(tmp.path() + "/ck");
  ck.Array("w", {4, 3}, {2, 3});
  const std::string chunk = ck.dir() + "/w/1.0";
  const std::string full = ReadFileBytes(chunk);
  WriteFileBytes(chunk, full.substr(0, full.size() - 1));
  EXPECT_THAT(
      [&] { Open(ck.dir()); },
      ThrowsError(ErrorKind::kCorruption, "chunk file " + chunk + " of 'w' holds 23 bytes"));
  WriteFileBytes(chunk, full + "x");
  EXPECT_THAT(
      [&] { Open(ck.dir()); },
      ThrowsError(ErrorKind::kCorruption, "chunk file " + chunk + " of 'w' holds 25 bytes"));
  fs::remove(chunk);
  EXPECT_THAT([&] { Open(ck.dir()); },
              ThrowsError(ErrorKind::kCorruption, "chunk file " + chunk + " of 'w' is missing"));
  // Truncated after open: the read refuses it too.
  WriteFileBytes(chunk, full);
  auto reader = Open(ck.dir());
  WriteFileBytes(chunk, full.substr(0, 4));
  const StoredTensor& t = reader->metadata().tensors.at("w");
  EXPECT_THAT([&] { ReadGlobal(*reader, t); }, ThrowsError(ErrorKind::kCorruption, chunk));
}

TEST(ZarrReaderTest, HostileZarrayIsRefusedNamingIt) {
  ScopedTempDir tmp;
  ZarrDir ck(tmp.path() + "/ck");
  ck.Array("w", {4, 3}, {2, 3});
  const std::string zarray = ck.dir() + "/w/.zarray";
  nlohmann::json z = nlohmann::json::parse(ReadFileBytes(zarray));
  z["dtype"] = "<c16";
  WriteFileBytes(zarray, z.dump());
  EXPECT_THAT([&] { Open(ck.dir()); },
              ThrowsError(ErrorKind::kUnsupported, zarray + ": field 'dtype'"));
  z["dtype"] = "<f4";
  z["chunks"] = {1, 3};  // a chunk size the files do not have (4 chunks of 12 bytes named)
  WriteFileBytes(zarray, z.dump());
  EXPECT_THAT([&] { Open(ck.dir()); }, ThrowsError(ErrorKind::kCorruption, ck.dir() + "/w/"));
  // A grid of 2^40 chunks is refused before it is enumerated.
  z["shape"] = {int64_t{1} << 40, 3};
  z["chunks"] = {1, 3};
  WriteFileBytes(zarray, z.dump());
  EXPECT_THAT([&] { Open(ck.dir()); },
              ThrowsError(ErrorKind::kCorruption, zarray + ": shape (1099511627776, 3)"));
  WriteFileBytes(zarray, std::string(kLargestZarray + 1, ' '));
  EXPECT_THAT([&] { Open(ck.dir()); }, ThrowsError(ErrorKind::kCorruption, zarray));
}

TEST(ZarrReaderTest, LinksAreNotFollowedOutOfTheCheckpoint) {
  ScopedTempDir tmp;
  ZarrDir outside(tmp.path() + "/outside");
  outside.Array("secret", {2}, {2});
  {
    // A tensor directory that is a link to an array elsewhere: a key cannot
    // lead out of the checkpoint.
    ZarrDir ck(tmp.path() + "/ck1");
    fs::create_directory_symlink("../outside/secret", ck.dir() + "/w");
    EXPECT_THAT([&] { Open(ck.dir()); },
                ThrowsError(ErrorKind::kCorruption, ck.dir() + "/w is a symbolic link"));
  }
  {
    ZarrDir ck(tmp.path() + "/ck2");
    ck.Array("w", {2}, {2});
    fs::remove(ck.dir() + "/w/0");
    fs::create_symlink(outside.dir() + "/secret/0", ck.dir() + "/w/0");
    EXPECT_THAT([&] { Open(ck.dir()); },
                ThrowsError(ErrorKind::kCorruption, ck.dir() + "/w/0 is a symbolic link"));
  }
  {
    ZarrDir ck(tmp.path() + "/ck3");
    ck.Array("w", {2}, {2});
    fs::remove(ck.dir() + "/w/.zarray");
    fs::create_symlink(outside.dir() + "/secret/.zarray", ck.dir() + "/w/.zarray");
    EXPECT_THAT([&] { Open(ck.dir()); },
                ThrowsError(ErrorKind::kCorruption, ck.dir() + "/w/.zarray is a symbolic link"));
  }
  {
    ZarrDir ck(tmp.path() + "/ck4");
    fs::create_directories(ck.dir() + "/obj");
    fs::create_symlink(outside.dir() + "/common.pt", ck.dir() + "/obj/shard_0_1.pt");
    EXPECT_THAT([&] { Open(ck.dir()); },
                ThrowsError(ErrorKind::kCorruption, ck.dir() + "/obj/shard_0_1.pt is a symbolic"));
  }
}

TEST(ZarrReaderTest, ObjectsAndTheirNames) {
  ScopedTempDir tmp;
  ZarrDir ck(tmp.path() + "/ck");
  fs::create_directories(ck.dir() + "/rng_state");
  fs::create_directories(ck.dir() + "/a/b");
  WriteFileBytes(ck.dir() + "/rng_state/shard_0.1_2.2.pt", TorchSaveJson({{"seed", 1}}));
  WriteFileBytes(ck.dir() + "/rng_state/shard_1.1_2.2.pt", TorchSaveJson({{"seed", 2}}));
  WriteFileBytes(ck.dir() + "/a/b/shard_0_1.pt", TorchSaveJson("x"));
  // Old Megatron names: the last axis of the shape omitted.
  fs::create_directories(ck.dir() + "/old");
  WriteFileBytes(ck.dir() + "/old/shard_0.0_1.pt", TorchSaveJson(1));
  WriteFileBytes(ck.dir() + "/old/shard_0.2_1.pt", TorchSaveJson(3));
  auto reader = Open(ck.dir());
  const auto& objects = reader->metadata().objects;
  ASSERT_EQ(objects.size(), 5u);
  const StoredObject& o = objects.at("rng_state/shard_1.1_2.2");
  EXPECT_EQ(o.key, "rng_state");
  EXPECT_EQ(o.global_offset, (Shape{1, 1}));
  EXPECT_EQ(o.global_shape, (Shape{2, 2}));
  EXPECT_EQ(reader->ReadObject(o), R"({"seed":2})");
  // Its record: torch.save([value]), as DCP stores objects.
  std::shared_ptr<const ObjectRecord> record = reader->ReadObjectRecord(o);
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->encoding, kTorchSaveEncoding);
  EXPECT_EQ(record->value, nlohmann::json({{"seed", 2}}));
  EXPECT_EQ(TorchLoadJson(ZipReader(record->bytes, "record")),
            nlohmann::json::array({{{"seed", 2}}}));
  ASSERT_NE(reader->CommonRecord(), nullptr);
  EXPECT_EQ(TorchLoadJson(ZipReader(reader->CommonRecord()->bytes, "common")),
            nlohmann::json::array({{{"iteration", 3}}}));
  EXPECT_EQ(reader->ReadObject(objects.at("a/b/shard_0_1")), "\"x\"");
  EXPECT_EQ(objects.at("old/shard_0.2_1.3").global_shape, (Shape{1, 3}));
  EXPECT_EQ(objects.at("old/shard_0.2_1.3").file, "old/shard_0.2_1.pt");
  EXPECT_EQ(reader->ReadObject(objects.at("old/shard_0.2_1.3")), "3");
  // A damaged object is refused naming it; a name that is no shard's too.
  WriteFileBytes(ck.dir() + "/a/b/shard_0_1.pt", "PK\x03\x04garbage");
  EXPECT_THAT([&] { Open(ck.dir())->ReadObject(objects.at("a/b/shard_0_1")); },
              ThrowsError(ErrorKind::kCorruption, ck.dir() + "/a/b/shard_0_1.pt"));
  WriteFileBytes(ck.dir() + "/a/b/shard_x_y.pt", TorchSaveJson(1));
  EXPECT_THAT([&] { Open(ck.dir()); },
              ThrowsError(ErrorKind::kCorruption, ck.dir() + "/a/b/shard_x_y.pt"));
}

TEST(ZarrReaderTest, DetectionCommitAndWritesRefused) {
  ScopedTempDir tmp;
  ZarrDir ck(tmp.path() + "/ck");
  ck.Array("w", {2}, {2});
  EXPECT_TRUE(ZarrFormat().Detect(Env::Default(), ck.dir()));
  // A torch_dist metadata.json is not zarr's; without metadata.json the save never finished.
  WriteFileBytes(ck.dir() + "/metadata.json", R"({"sharded_backend": "torch_dist"})");
  EXPECT_FALSE(ZarrFormat().Detect(Env::Default(), ck.dir()));
  fs::remove(ck.dir() + "/metadata.json");
  EXPECT_THAT([&] { DetectFormat(Env::Default(), ck.dir()); },
              ThrowsError(ErrorKind::kIncomplete, ck.dir()));
  EXPECT_THAT([&] { ZarrFormat().OpenReader(Env::Default(), ck.dir()); },
              ThrowsError(ErrorKind::kIncomplete, ck.dir() + "/metadata.json"));
  WriteFileBytes(ck.dir() + "/metadata.json",
                 R"({"sharded_backend": "zarr", "sharded_backend_version": 2})");
  EXPECT_THAT([&] { ZarrFormat().OpenReader(Env::Default(), ck.dir()); },
              ThrowsError(ErrorKind::kUnsupported, "sharded_backend_version 2"));
  WriteFileBytes(ck.dir() + "/metadata.json", R"({"sharded_backend": "zarr"})");
  fs::remove(ck.dir() + "/common.pt");
  EXPECT_THAT([&] { Open(ck.dir()); },
              ThrowsError(ErrorKind::kIncomplete, ck.dir() + "/common.pt is missing"));
  EXPECT_THAT([&] { ZarrFormat().PrepareDirectory(Env::Default(), tmp.path() + "/new", false); },
              ThrowsError(ErrorKind::kUnsupported, "does not write it"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/new"));
}

// fixtures/megatron-zarr: every tensor equals expected/ byte for byte.
TEST(ZarrFixtureTest, MegatronZarrSaveReadsAsExpected) {
  const std::string root = DISTCKPT_ZARR_FIXTURES;
  const std::string dir = root + "/gpt-tp2-pp2";
  ASSERT_EQ(DetectFormat(Env::Default(), dir).name(), "zarr");
  auto reader = Open(dir);
  const CheckpointMetadata& md = reader->metadata();
  const nlohmann::json expected =
      nlohmann::json::parse(ReadFileBytes(root + "/expected/gpt-tp2-pp2/expected.json"));
  ASSERT_EQ(md.tensors.size(), expected["tensors"].size());
  for (const nlohmann::json& e : expected["tensors"]) {
    const std::string key = e["key"];
    ASSERT_TRUE(md.tensors.contains(key)) << key;
    const StoredTensor& t = md.tensors.at(key);
    EXPECT_EQ(t.dtype, DTypeFromName(e["dtype"].get<std::string>())) << key;
    EXPECT_EQ(t.global_shape, e["shape"].get<Shape>()) << key;
    const std::vector<std::byte> data = ReadGlobal(*reader, t);
    const std::string want =
        ReadFileBytes(root + "/expected/gpt-tp2-pp2/" + e["file"].get<std::string>());
    ASSERT_EQ(data.size(), want.size()) << key;
    EXPECT_EQ(std::memcmp(data.data(), want.data(), want.size()), 0) << key;
  }
  // rng_state per (pp, tp) and the common state as Megatron saved them.
  EXPECT_EQ(md.objects.size(), 4u);
  const nlohmann::json rng =
      nlohmann::json::parse(reader->ReadObject(md.objects.at("rng_state/shard_1.0_2.2")));
  EXPECT_TRUE(rng.contains("torch_rng_state"));
  EXPECT_EQ(md.common["iteration"], 10);
  EXPECT_EQ(md.common["args"]["__object__"], "argparse.Namespace");
  EXPECT_EQ(md.common["args"]["state"]["ckpt_format"], "zarr");
}

}  // namespace
}  // namespace distckpt
