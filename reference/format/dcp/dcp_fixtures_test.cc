// Reads every checkpoint in fixtures/dcp (written by real torch 1.13 and 2.6,
// and by the stdlib-only dcp_rawwrite.py) and checks every element against
// the fixture's expected.json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "format/dcp/dcp_format.h"
#include "format/dcp/testing.h"

namespace distckpt {
namespace {

std::unique_ptr<CheckpointReader> Open(const std::string& dir) {
  Env* env = Env::Default();
  const Format& format = DetectFormat(env, dir);
  EXPECT_EQ(format.name(), "dcp");
  return format.OpenReader(env, dir);
}

void CheckTensor(CheckpointReader& reader, const std::string& key, const nlohmann::json& expected) {
  SCOPED_TRACE(key);
  const CheckpointMetadata& md = reader.metadata();
  ASSERT_TRUE(md.tensors.contains(key));
  const StoredTensor& t = md.tensors.at(key);
  EXPECT_EQ(t.dtype, DTypeFromName(expected.at("dtype").get<std::string>()));
  EXPECT_EQ(t.global_shape, expected.at("shape").get<Shape>());
  std::vector<std::byte> data = ReadGlobal(reader, t);
  const std::string formula = expected.at("values").get<std::string>();
  for (size_t i = 0; i < static_cast<size_t>(Volume(t.global_shape)); ++i) {
    ASSERT_TRUE(ElementEquals(data, t.dtype, i, formula)) << "element " << i;
  }
}

class TorchFixtureTest : public testing::TestWithParam<std::string> {};

TEST_P(TorchFixtureTest, EveryTensorAndObjectMatchesExpectedJson) {
  const std::string dir = DcpFixture(GetParam());
  nlohmann::json expected = nlohmann::json::parse(ReadFileBytes(dir + "/expected.json"));
  std::unique_ptr<CheckpointReader> reader = Open(dir);
  for (const auto& [key, e] : expected.at("tensors").items()) CheckTensor(*reader, key, e);
  const nlohmann::json& common = reader->metadata().common;
  EXPECT_EQ(common.at("step"), expected.at("objects").at("step"));
  const bool torch2 = GetParam().starts_with("torch-2");
  if (expected.at("objects").contains("nested")) {
    // torch 2 flattens {"nested": {"lr", "w"}} into "nested.lr" (a bytes item,
    // put back at its planner_data path) and the tensor "nested.w"; 1.13 keeps
    // the dict as one bytes item, its tensor inside.
    EXPECT_EQ(common.at("nested").at("lr"), 0.125);
    if (torch2) {
      CheckTensor(*reader, "nested.w",
                  {{"dtype", "float32"}, {"shape", {2, 2}}, {"values", "v(i) = i * 0.5"}});
    } else {
      EXPECT_EQ(common.at("nested").at("w"),
                nlohmann::json(
                    {{"__tensor__",
                      {{"dtype", "float32"}, {"shape", {2, 2}}, {"data", {0.0, 0.5, 1.0, 1.5}}}}}));
    }
  }
  EXPECT_EQ(reader->metadata().format, "dcp");
  EXPECT_THAT(reader->metadata().writer, testing::HasSubstr(torch2 ? "2.x" : "1.13"));
  EXPECT_TRUE(reader->metadata().objects.empty());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TorchFixtureTest,
                         testing::Values("torch-1.13/r1_single_file", "torch-1.13/r1_file_per_item",
                                         "torch-1.13/r2_sharded", "torch-2.6/r1_single_file",
                                         "torch-2.6/r1_file_per_item", "torch-2.6/r2_sharded"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(TorchFixtureTest, ShardedTensorsKeepTheirChunksAndRanks) {
  std::unique_ptr<CheckpointReader> reader = Open(DcpFixture("torch-2.6/r2_sharded"));
  const StoredTensor& row = reader->metadata().tensors.at("row_f32");
  ASSERT_EQ(row.chunks.size(), 2u);
  EXPECT_EQ(row.chunks[0].box, (Box{{0, 0}, {3, 4}}));
  EXPECT_EQ(row.chunks[1].box, (Box{{3, 0}, {2, 4}}));
  EXPECT_EQ(row.chunks[0].file, "__0_0.distcp");
  EXPECT_EQ(row.chunks[1].writer_rank, 1);
  EXPECT_EQ(row.chunks[1].length, 2u * 4 * 4);
  // torch 2.6 put the replicated tensors on rank 1 (dedup by planned bytes).
  EXPECT_EQ(reader->metadata().tensors.at("rep_f32").chunks[0].file, "__1_0.distcp");
}

TEST(TorchFixtureTest, ContiguousChunksReadOnlyTheRequestedBytes) {
  std::unique_ptr<CheckpointReader> reader = Open(DcpFixture("torch-2.6/r2_sharded"));
  const StoredTensor& t = reader->metadata().tensors.at("row_i64");  // rows (0,2) and (2,1) of 3x3
  const StoredChunk& c = t.chunks[0];
  int64_t value = 0;
  ReadRun run{(1 * 3 + 2) * 8, 8, reinterpret_cast<std::byte*>(&value)};  // element (1, 2)
  reader->ReadChunk(t, c, {&run, 1}, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(value, FixtureI64(5));
  // One read of the small item (headers, data.pkl, data, zip directory): the
  // 8 bytes come from it, not from a second read, and its CRC32 is checked
  // (the whole record is in memory anyway).
  EXPECT_EQ(reader->stats().chunks_verified, 1u);
  EXPECT_EQ(reader->stats().chunks_unverified, 0u);
  EXPECT_EQ(reader->stats().bytes_read, 1180u);

  std::vector<std::byte> whole = ReadGlobal(*reader, t, VerifyPolicy::kWhenWhole);
  EXPECT_EQ(reader->stats().chunks_verified, 3u);     // whole reads check the zip's CRC32
  EXPECT_EQ(reader->stats().bytes_read, 2u * 1180u);  // plus chunk 1's item (1180 bytes too), once
}

TEST(RawStdlibFixtureTest, BothTargetsReadIdentically) {
  for (const char* target : {"raw-stdlib/target-2.x", "raw-stdlib/target-1.13"}) {
    SCOPED_TRACE(target);
    std::unique_ptr<CheckpointReader> reader = Open(DcpFixture(target));
    CheckTensor(*reader, "row_f32",
                {{"dtype", "float32"}, {"shape", {5, 4}}, {"values", "v(i) = i * 0.5"}});
    CheckTensor(*reader, "rep_bf16",
                {{"dtype", "bfloat16"}, {"shape", {6}}, {"values", "v(i) = i * 0.25 - 1"}});
    CheckTensor(*reader, "rep_i64", {{"dtype", "int64"}, {"shape", {2, 3}}, {"values", ""}});
    EXPECT_EQ(reader->metadata().common, nlohmann::json({{"step", 7}}));
  }
}

}  // namespace
}  // namespace distckpt
