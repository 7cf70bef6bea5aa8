// The fsdp-dtensor format (plain DCP as Megatron's --ckpt-format fsdp_dtensor
// and torch's dcp.save write it): uneven FSDP row chunks, no Megatron files,
// the common state as bytes items; and the torch-written fixture in
// fixtures/fsdp-dtensor read without torch.
#include <gtest/gtest.h>

#include <fstream>

#include "format/dcp/dcp_format.h"
#include "format/dcp/dcp_layout.h"
#include "format/dcp/testing.h"
#include "format/dcp/torch_save.h"

namespace distckpt {
namespace {

std::string Rows(int64_t first_row, int64_t rows, int64_t cols) {
  std::string out(static_cast<size_t>(rows * cols) * 4, '\0');
  for (int64_t i = 0; i < rows * cols; ++i) {
    StoreFromDouble(out.data(), DType::kF32, static_cast<size_t>(i),
                    double(first_row * cols + i) * 0.5);
  }
  return out;
}

// Three FSDP ranks holding uneven row blocks of "w" (7, 3): [0, 4), [4, 7)
// and none (an empty shard writes no chunk, as Megatron's uneven DTensors).
void SaveUneven(const std::string& dir) {
  const Format& format = FsdpDtensorFormat();
  Env* env = Env::Default();
  const std::string write_dir = format.PrepareDirectory(env, dir, false);
  CheckpointMetadata merged;
  merged.format = std::string(format.name());
  const int64_t starts[] = {0, 4, 7, 7};
  for (int rank = 0; rank < 3; ++rank) {
    auto w = format.NewWriter(env, write_dir, rank);
    const int64_t rows = starts[rank + 1] - starts[rank];
    if (rows > 0) {
      w->WriteTensorChunk("model.module.w", DType::kF32, {7, 3}, Box{{starts[rank], 0}, {rows, 3}},
                          std::nullopt, Bytes(Rows(starts[rank], rows, 3)));
    }
    merged.MergeFrom(w->Finish());
  }
  merged.common = {{"iteration", 7},
                   {"args", {{"lr", 0.5}}},
                   {"checkpoint_version", 3.0},
                   {"sched", {{"max_lr", 0.1}, {"steps", {{"0", {1, 2}}}}}},
                   {"ns",
                    {{"__object__", "argparse.Namespace"},
                     {"args", nlohmann::json::array()},
                     {"state", {{"seed", 3}}}}}};
  format.Commit(env, dir, write_dir, merged);
}

TEST(FsdpDtensorFormatTest, WritesPlainDcpWithBytesItems) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  SaveUneven(dir);
  // No common.pt, no metadata.json; rank 2 wrote nothing (no file); the
  // common state sits after rank 0's stream 0, in __0_1.
  EXPECT_EQ(
      Env::Default()->ListDir(dir),
      (std::vector<std::string>{".metadata", "__0_0.distcp", "__0_1.distcp", "__1_0.distcp"}));
  DcpMetadata dcp = DecodeDcpMetadata(ReadFileBytes(dir + "/.metadata"), "md");
  std::vector<std::string> bytes_items;
  for (const DcpEntry& e : dcp.entries) {
    if (e.is_bytes) bytes_items.push_back(e.fqn);
    if (e.fqn == "model.module.w") {
      ASSERT_EQ(e.chunks.size(), 2u);
      EXPECT_EQ(e.chunks[1], (DcpChunk{{4, 0}, {3, 3}}));
    }
  }
  // Dicts flattened as torch's planner does; an argparse.Namespace is one value.
  EXPECT_EQ(bytes_items, (std::vector<std::string>{"args.lr", "checkpoint_version", "iteration",
                                                   "ns", "sched.max_lr", "sched.steps.0"}));
  for (const DcpStorage& s : dcp.storage) {
    EXPECT_NO_THROW(ZipReader(
        ReadFileBytes(dir + "/" + s.relative_path).substr(s.offset_in_file, s.length), s.fqn));
  }
  EXPECT_EQ(DetectFormat(Env::Default(), dir).name(), "dcp");
  EXPECT_EQ(FormatByName("fsdp-dtensor").name(), "fsdp-dtensor");
}

TEST(FsdpDtensorFormatTest, ReadsBackUnevenChunksAndCommonState) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  SaveUneven(dir);
  auto reader = DetectFormat(Env::Default(), dir).OpenReader(Env::Default(), dir);
  const CheckpointMetadata& md = reader->metadata();
  const StoredTensor& t = md.tensors.at("model.module.w");
  EXPECT_EQ(t.global_shape, (Shape{7, 3}));
  std::vector<std::byte> data = ReadGlobal(*reader, t);
  for (size_t i = 0; i < 21; ++i) ASSERT_EQ(LoadAsDouble(data.data(), DType::kF32, i), i * 0.5);
  EXPECT_EQ(md.common.at("iteration"), 7);
  EXPECT_EQ(md.common.at("args").at("lr"), 0.5);
  EXPECT_EQ(md.common.at("sched").at("steps").at("0"), nlohmann::json({1, 2}));
  EXPECT_EQ(md.common.at("ns").at("state").at("seed"), 3);
  EXPECT_EQ(md.common.at("checkpoint_version"), 3.0);
}

TEST(FsdpDtensorFormatTest, OverwriteKeepsNoStaleCommonFile) {
  ScopedTempDir tmp;
  const std::string dir = tmp.path() + "/ck";
  SaveUneven(dir);
  EXPECT_THROW(FsdpDtensorFormat().PrepareDirectory(Env::Default(), dir, false), CheckpointError);
  const std::string write_dir = FsdpDtensorFormat().PrepareDirectory(Env::Default(), dir, true);
  EXPECT_NE(write_dir, dir);  // staged; the old checkpoint stays until the commit
}

// fixtures/fsdp-dtensor: written by torch 2.6 with Megatron's uneven DTensor
// chunks and key names (scenarios/peer/fsdp_dtensor_peer.py write; README.md
// there): torch-uneven on a 1-D mesh of 3 gloo ranks [Shard(0)],
// torch-uneven-tp2 on a (3, 2) (dp_cp, tp) mesh [Shard(0), Shard(tp_dim)].
// expected.json holds every tensor's global shape, chunk count and values,
// and the common state as distckpt reads it.
class FsdpDtensorFixtureTest : public testing::TestWithParam<const char*> {};

TEST_P(FsdpDtensorFixtureTest, ReadsTorchWrittenFixture) {
  const std::string dir = std::string(DISTCKPT_FSDP_DTENSOR_FIXTURES) + "/" + GetParam();
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in) << dir;
  const nlohmann::json expected = nlohmann::json::parse(in);
  auto reader = DetectFormat(Env::Default(), dir).OpenReader(Env::Default(), dir);
  const CheckpointMetadata& md = reader->metadata();
  ASSERT_EQ(md.tensors.size(), expected.at("tensors").size());
  size_t uneven = 0;  // tensors whose chunks differ in shape
  for (const auto& [key, want] : expected.at("tensors").items()) {
    SCOPED_TRACE(key);
    const StoredTensor& t = md.tensors.at(key);
    EXPECT_EQ(t.global_shape, want.at("shape").get<Shape>());
    EXPECT_EQ(t.chunks.size(), want.at("chunks").get<size_t>());
    for (const StoredChunk& c : t.chunks) uneven += c.box.shape != t.chunks[0].box.shape;
    std::vector<std::byte> data = ReadGlobal(*reader, t);
    const auto& values = want.at("values");
    ASSERT_EQ(values.size(), static_cast<size_t>(Volume(t.global_shape)));
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(LoadAsDouble(data.data(), t.dtype, i), values[i].get<double>()) << i;
    }
  }
  EXPECT_GT(uneven, 0u);
  for (const auto& [key, want] : expected.at("common").items()) {
    EXPECT_EQ(md.common.at(key), want) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Torch26, FsdpDtensorFixtureTest,
                         testing::Values("torch-uneven", "torch-uneven-tp2"));

}  // namespace
}  // namespace distckpt
