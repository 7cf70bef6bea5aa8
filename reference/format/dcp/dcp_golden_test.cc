// Golden bytes: the DCP writer reproduces fixtures/dcp/raw-stdlib (written by
// fixtures/dcp/tools/dcp_rawwrite.py, which real torch 1.13 and 2.6 load) byte for
// byte: the .metadata pickle for both targets, every tensor item, the
// BYTE_IO item of an int. After its items a data file holds distckpt's item
// index (item_index.h), which torch never reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "format/dcp/dcp_format.h"
#include "format/dcp/dcp_metadata.h"
#include "format/dcp/item_index.h"
#include "format/dcp/testing.h"
#include "format/dcp/torch_save.h"

namespace distckpt {
namespace {

// The values dcp_rawwrite.py writes: f32 i*0.5, bf16 i*0.25-1, i64 i*1000000007-3.
std::string Values(DType dtype, int64_t n, int64_t start = 0) {
  std::string out(static_cast<size_t>(n) * DTypeSize(dtype), '\0');
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = start + k;
    if (dtype == DType::kI64) {
      int64_t v = FixtureI64(i);
      std::memcpy(out.data() + k * 8, &v, 8);
    } else {
      StoreFromDouble(
          out.data(), dtype, static_cast<size_t>(k),
          FixtureValue(dtype == DType::kF32 ? "v(i) = i * 0.5" : "v(i) = i * 0.25 - 1", i));
    }
  }
  return out;
}

// The item index after the items of `file` (which end at `items_end`):
// one entry per item, each naming its storage record as the zip does.
void ExpectItemIndex(const std::string& file, uint64_t items_end, size_t items) {
  SCOPED_TRACE("item index");
  const auto bytes = std::as_bytes(std::span(file.data(), file.size()));
  std::optional<DcpIndexTrailer> trailer =
      ParseDcpIndexTrailer(bytes.subspan(file.size() - kDcpIndexTrailerBytes), file.size(), "file");
  ASSERT_TRUE(trailer.has_value());
  EXPECT_EQ(trailer->items_end, items_end);
  const std::vector<DcpIndexEntry> entries =
      ParseDcpIndexTable(bytes.subspan(trailer->table_offset,
                                       file.size() - kDcpIndexTrailerBytes - trailer->table_offset),
                         *trailer, "file");
  ASSERT_EQ(entries.size(), items);
  for (size_t i = 0; i < items; ++i) {
    const uint64_t end = i + 1 < items ? entries[i + 1].item_offset : items_end;
    ZipReader zip(
        std::string_view(file).substr(entries[i].item_offset, end - entries[i].item_offset),
        "item");
    const ZipReader::Entry& record = zip.Get("data/0");
    EXPECT_EQ(entries[i].data_offset, entries[i].item_offset + zip.DataOffset(record)) << i;
    EXPECT_EQ(entries[i].data_size, record.size) << i;
    EXPECT_EQ(entries[i].crc, record.crc) << i;
    // Index version 3: tiles of at most 16 bytes a piece (tiny records).
    EXPECT_EQ(entries[i].block_size, 16u) << i;
    EXPECT_GE(entries[i].tiles, 1u) << i;
  }
}

// dcp_rawwrite.py's checkpoint as a DcpMetadata, in its order.
DcpMetadata RawwriteMetadata(DcpTarget target) {
  DcpMetadata md;
  md.target = target;
  md.entries = {{"row_f32", false, DType::kF32, {5, 4}, {{{0, 0}, {3, 4}}, {{3, 0}, {2, 4}}}},
                {"rep_bf16", false, DType::kBF16, {6}, {{{0}, {6}}}},
                {"rep_i64", false, DType::kI64, {2, 3}, {{{0, 0}, {2, 3}}}},
                {"step", true, DType::kF32, {}, {}}};
  md.planner_data.emplace();
  for (const DcpEntry& e : md.entries)
    md.planner_data->emplace_back(e.fqn, std::vector<std::string>{e.fqn});
  md.storage = {{"step", std::nullopt, std::nullopt, "__0_0.distcp", 0, 402, {}},
                {"row_f32", Shape{0, 0}, 0, "__0_0.distcp", 402, 718, {}},
                {"rep_bf16", Shape{0}, 0, "__0_0.distcp", 1120, 654, {}},
                {"row_f32", Shape{3, 0}, 1, "__1_0.distcp", 0, 718, {}},
                {"rep_i64", Shape{0, 0}, 0, "__1_0.distcp", 718, 718, {}}};
  return md;
}

TEST(DcpGoldenTest, MetadataPickleIsByteIdentical) {
  for (auto [target, dir] : {std::pair{DcpTarget::kTorch2, "target-2.x"},
                             std::pair{DcpTarget::kTorch113, "target-1.13"}}) {
    SCOPED_TRACE(dir);
    const std::string golden =
        ReadFileBytes(DcpFixture(std::string("raw-stdlib/") + dir + "/.metadata"));
    ASSERT_FALSE(golden.empty());
    EXPECT_EQ(EncodeDcpMetadata(RawwriteMetadata(target)), golden);
    // And decoding the golden file gives back exactly that metadata.
    EXPECT_EQ(DecodeDcpMetadata(golden, dir), RawwriteMetadata(target));
  }
}

TEST(DcpGoldenTest, WriterDataFilesAreByteIdentical) {
  const std::string golden0 = ReadFileBytes(DcpFixture("raw-stdlib/target-2.x/__0_0.distcp"));
  const std::string golden1 = ReadFileBytes(DcpFixture("raw-stdlib/target-2.x/__1_0.distcp"));
  ASSERT_EQ(golden0, ReadFileBytes(DcpFixture("raw-stdlib/target-1.13/__0_0.distcp")));
  ScopedTempDir dir;
  Env* env = Env::Default();
  auto rank0 = DcpFormat().NewWriter(env, dir.path(), 0);
  StoredChunk a = rank0->WriteTensorChunk("row_f32", DType::kF32, {5, 4}, Box{{0, 0}, {3, 4}},
                                          std::nullopt, Bytes(Values(DType::kF32, 12)));
  StoredChunk b = rank0->WriteTensorChunk("rep_bf16", DType::kBF16, {6}, Box{{0}, {6}},
                                          std::nullopt, Bytes(Values(DType::kBF16, 6)));
  rank0->Finish();
  auto rank1 = DcpFormat().NewWriter(env, dir.path(), 1);
  rank1->WriteTensorChunk("row_f32", DType::kF32, {5, 4}, Box{{3, 0}, {2, 4}}, std::nullopt,
                          Bytes(Values(DType::kF32, 8, 12)));
  StoredChunk d = rank1->WriteTensorChunk("rep_i64", DType::kI64, {2, 3}, Box{{0, 0}, {2, 3}},
                                          std::nullopt, Bytes(Values(DType::kI64, 6)));
  CheckpointMetadata md1 = rank1->Finish();

  const std::string file1 = ReadFileBytes(dir.path() + "/__1_0.distcp");
  EXPECT_EQ(file1.substr(0, golden1.size()), golden1);
  ExpectItemIndex(file1, golden1.size(), 2);
  // Rank 0's golden file starts with the BYTE_IO item torch.save(7).
  const std::string step = TorchSaveJson(7);
  ASSERT_EQ(step.size(), 402u);
  EXPECT_EQ(golden0.substr(0, 402), step);
  const std::string file0 = ReadFileBytes(dir.path() + "/__0_0.distcp");
  EXPECT_EQ(file0.substr(0, golden0.size() - 402), golden0.substr(402));
  ExpectItemIndex(file0, golden0.size() - 402, 2);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, 718u);
  EXPECT_EQ(b.length, 12u);  // element bytes; the item is longer
  EXPECT_EQ(d.offset, 718u);
  EXPECT_EQ(md1.tensors.at("row_f32").chunks[0].writer_rank, 1);
}

}  // namespace
}  // namespace distckpt
