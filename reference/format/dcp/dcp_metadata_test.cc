#include "format/dcp/dcp_metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "format/dcp/pickler.h"
#include "format/dcp/testing.h"

namespace distckpt {
namespace {

DcpMetadata Example(DcpTarget target) {
  DcpMetadata md;
  md.target = target;
  md.entries = {{"w", false, DType::kBF16, {4, 6}, {{{0, 0}, {4, 3}}, {{0, 3}, {4, 3}}}},
                {"scalar", false, DType::kF64, {}, {{{}, {}}}},
                {"opt/shard_0_2", true, DType::kF32, {}, {}}};
  md.planner_data.emplace();
  md.planner_data->emplace_back("w", std::vector<std::string>{"model", "w"});
  md.storage = {{"w", Shape{0, 0}, 0, "__0_0.distcp", 0, 900, {}},
                {"w", Shape{0, 3}, 1, "__1_0.distcp", 0, 900, {}},
                {"scalar", Shape{}, 0, "__0_0.distcp", 900, 700, {}},
                {"opt/shard_0_2", std::nullopt, std::nullopt, "__1_0.distcp", 900, 500, {}}};
  md.mcore_orig_shapes["flat"] = {8, 5, 40};
  md.distckpt_info = {{"topology", "tp=2"}, {"writer", "distckpt test"}};
  return md;
}

TEST(DcpMetadataTest, RoundTripsBothTargets) {
  for (DcpTarget target : {DcpTarget::kTorch2, DcpTarget::kTorch113}) {
    const DcpMetadata md = Example(target);
    const std::string pickle = EncodeDcpMetadata(md);
    EXPECT_EQ(DecodeDcpMetadata(pickle, "md"), md);
    const bool torch2 = target == DcpTarget::kTorch2;
    EXPECT_EQ(pickle.find("torch.distributed.checkpoint.metadata") != std::string::npos, torch2);
    EXPECT_EQ(pickle.find("torch.distributed._shard.checkpoint.metadata") != std::string::npos,
              !torch2);
  }
}

TEST(DcpMetadataTest, DecodesTorchWrittenMetadata) {
  // Python 3.13 / torch 2.6: protocol 4, memo, storage_meta with a pathlib._local.PosixPath.
  DcpMetadata md =
      DecodeDcpMetadata(ReadFileBytes(DcpFixture("torch-2.6/r2_sharded/.metadata")), "2.6");
  EXPECT_EQ(md.target, DcpTarget::kTorch2);
  EXPECT_EQ(md.entries.size(), 6u);
  EXPECT_EQ(md.storage.size(), 9u);
  ASSERT_TRUE(md.planner_data.has_value());
  // Python 3.11 / torch 1.13: getattr(MEM_FORMAT_ENCODING, ...) spelling, planner_data None.
  DcpMetadata old =
      DecodeDcpMetadata(ReadFileBytes(DcpFixture("torch-1.13/r2_sharded/.metadata")), "1.13");
  EXPECT_EQ(old.target, DcpTarget::kTorch113);
  EXPECT_FALSE(old.planner_data.has_value());
  EXPECT_EQ(old.entries.size(), 6u);
}

// A Metadata pickle whose state dict is written by `fields`.
std::string MetadataPickle(const std::function<void(PickleWriter&)>& fields) {
  PickleWriter w;
  w.Object("torch.distributed.checkpoint.metadata", "Metadata",
           [&] { w.Dict(false, [&] { fields(w); }); });
  return w.Finish();
}

void EmptyFields(PickleWriter& w) {
  w.Str("state_dict_metadata");
  w.Dict(true, [] {});
  w.Str("planner_data");
  w.None();
  w.Str("storage_data");
  w.Dict(true, [] {});
}

TEST(DcpMetadataTest, ToleratesNewerFields) {
  // storage_meta = StorageMeta(checkpoint_id=PosixPath('ck'), save_id='x', load_id=None), version
  // '1.0.0'
  const std::string pickle = MetadataPickle([](PickleWriter& w) {
    EmptyFields(w);
    w.Str("storage_meta");
    w.Object("torch.distributed.checkpoint.metadata", "StorageMeta", [&] {
      w.Dict(false, [&] {
        w.Str("checkpoint_id");
        w.Reduce([&] { w.Global("pathlib._local", "PosixPath"); }, 1, [&] { w.Str("ck"); });
        w.Str("save_id");
        w.Str("x");
        w.Str("load_id");
        w.None();
      });
    });
    w.Str("version");
    w.Str("1.0.0");
  });
  DcpMetadata md = DecodeDcpMetadata(pickle, "new");
  EXPECT_EQ(md.version, "1.0.0");
  EXPECT_TRUE(md.entries.empty());
}

TEST(DcpMetadataTest, RefusesMalformedMetadata) {
  PickleWriter not_metadata;
  not_metadata.Json({{"state_dict_metadata", 1}});
  EXPECT_THAT([&] { DecodeDcpMetadata(not_metadata.Finish(), "m"); },
              ThrowsError(ErrorKind::kCorruption, "m: the pickle holds a dict"));
  EXPECT_THAT(
      [] {
        DecodeDcpMetadata(MetadataPickle([](PickleWriter& w) {
                            w.Str("planner_data");
                            w.None();
                          }),
                          "m");
      },
      ThrowsError(ErrorKind::kCorruption, "no field 'state_dict_metadata'"));

  DcpMetadata md = Example(DcpTarget::kTorch2);
  md.entries[0].chunks[1].offsets = {0, 4};  // 4 + 3 > 6
  EXPECT_THAT([&] { DecodeDcpMetadata(EncodeDcpMetadata(md), "m"); },
              ThrowsError(ErrorKind::kCorruption, "m: state_dict_metadata['w']: chunk at (0, 4)"));
  md = Example(DcpTarget::kTorch2);
  md.storage.pop_back();
  md.storage.front().relative_path = "../../etc/passwd";  // decoded; LayoutFromDcp refuses it
  EXPECT_EQ(DecodeDcpMetadata(EncodeDcpMetadata(md), "m").storage.front().relative_path,
            "../../etc/passwd");
}

TEST(DcpMetadataTest, UnknownDTypesAreUnsupported) {
  std::string pickle = EncodeDcpMetadata(Example(DcpTarget::kTorch2));
  const std::string from = "torch\nbfloat16\n", to = "torch\ncomplex64\n";
  pickle.replace(pickle.find(from), from.size(), to);
  EXPECT_THAT([&] { DecodeDcpMetadata(pickle, "m"); },
              ThrowsError(ErrorKind::kUnsupported, "'w']: dtype torch.complex64"));
}

}  // namespace
}  // namespace distckpt
