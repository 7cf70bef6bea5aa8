#include "harness/expand/fp8_section.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "fp8/quantize.h"
#include "harness/run/runner.h"

namespace distckpt {
namespace {

Scenario Parse(const std::string& text) {
  return Scenario::FromJson(nlohmann::json::parse(text), "t.json");
}

// One fp8 tensor `w` of all 256 codes, TP-sharded, under the given options.
Scenario AllCodes(const std::string& options, const std::string& pairs) {
  return Parse(R"({"fp8": {"tensors": [{"key": "w", "shape": [16, 16], "shard": {"0": "tp"},
                  "values": "all_codes", )" +
               options + R"(}]}, "pairs": )" + pairs + "}");
}

void ExpectAllPass(const Scenario& s) {
  std::vector<PairResult> results = RunScenario(s, RunOptions{});
  ASSERT_FALSE(results.empty());
  for (const PairResult& r : results)
    EXPECT_TRUE(r.ok) << r.save << " -> " << r.load << ": " << r.reason;
}

TEST(Fp8SectionTest, ParsesOptionsAndRejectsBadFields) {
  Scenario s = Parse(R"({"fp8": {"storage": "raw", "tensors": [
      {"key": "a", "shape": [4], "format": "fp8_e5m2", "scale": 4, "load_dtype": "fp8_e4m3fn",
       "load_scale": 2, "expect_saturated": 3, "values": "all_codes"},
      {"key": "b", "shape": [4], "dtype": "f32", "storage": "dequantized"}]}})");
  ASSERT_EQ(s.fp8.size(), 2u);
  EXPECT_EQ(s.fp8[0].fp8.format, DType::kF8E5M2);
  EXPECT_EQ(s.fp8[0].fp8.storage, Fp8Storage::kRaw);
  EXPECT_EQ(s.fp8[0].fp8.scale, 4.0f);
  EXPECT_EQ(s.fp8[0].fp8.load_scale, 2.0f);
  EXPECT_EQ(s.fp8[0].fp8.expect_saturated, 3);
  EXPECT_TRUE(s.fp8[0].fp8.all_codes);
  EXPECT_EQ(s.fp8[0].tensor.dtype, DType::kBF16);  // the default nominal dtype
  EXPECT_EQ(s.fp8[1].fp8.storage, Fp8Storage::kDequantized);
  EXPECT_EQ(s.fp8[1].tensor.dtype, DType::kF32);
  EXPECT_THAT(
      [] { Parse(R"({"fp8": {"tensors": [{"key": "a", "shape": [4], "format": "bf16"}]}})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.fp8.tensors[0].format"));
  EXPECT_THAT([] { Parse(R"({"fp8": {"tensors": [{"key": "a", "shape": [4], "scale": 0}]}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.fp8.tensors[0].scale"));
  EXPECT_THAT(
      [] { Parse(R"({"fp8": {"tensors": [{"key": "a", "shape": [4], "dtype": "fp8_e5m2"}]}})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "nominal dtype"));
  EXPECT_THAT([] { Parse(R"({"fp8": {"storage": "packed", "tensors": []}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.fp8.storage"));
  EXPECT_THAT([] { Parse(R"({"fp8": {"tensors": [{"key": "a", "shape": [4], "amax": 1}]}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown field 'amax'"));
  EXPECT_THAT([] { Parse(R"({"fp8": {"scale": 1, "tensors": []}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown field 'scale'"));
  EXPECT_THAT(
      [] {
        Parse(R"({"tensors": [{"key": "a._scale_inv", "shape": [1]}],
                  "fp8": {"tensors": [{"key": "a", "shape": [4], "storage": "raw"}]}})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "key 'a._scale_inv' is also a key"));
}

TEST(Fp8SectionTest, RawStorageSavesCodesAndScaleInvCompanion) {
  Scenario s = AllCodes(R"("storage": "raw", "scale": 8)", "[]");
  Topology topo = Topology::Parse("tp=4");
  Node state = BuildFp8SaveState(s, topo, 2);
  const ShardedTensor& w = state.at("w").as<ShardedTensor>();
  EXPECT_EQ(w.dtype, DType::kF8E4M3FN);
  EXPECT_EQ(w.global_offset, (Shape{8, 0}));
  EXPECT_EQ(w.data.data_as<uint8_t>()[0], 128);  // the code at linear index 8 * 16
  const ShardedTensor& scale_inv = state.at(ScaleInvKey("w")).as<ShardedTensor>();
  EXPECT_EQ(scale_inv.data.data_as<float>()[0], 0.125f);
  EXPECT_EQ(scale_inv.replica_id, (ReplicaId{0, 2, 0}));  // replicated: main on tp rank 0 only
  // Dequantized storage: the nominal bf16 values, no companion.
  Node deq = BuildFp8SaveState(AllCodes(R"("scale": 8)", "[]"), topo, 0);
  EXPECT_EQ(deq.at("w").as<ShardedTensor>().dtype, DType::kBF16);
  EXPECT_EQ(deq.at("w").as<ShardedTensor>().data.At(0x38), E4M3FNToFloat(0x38) / 8);
  EXPECT_EQ(deq.as<Dict>().count(ScaleInvKey("w")), 0u);
}

// The hidden case: raw fp8 of all 256 codes of both formats round trips
// bit-exact (NaN and infinity codes included) under another sharding.
TEST(Fp8SectionTest, RawRoundTripIsBitExactOverAll256Codes) {
  for (const char* format : {"fp8_e4m3fn", "fp8_e5m2"}) {
    SCOPED_TRACE(format);
    ExpectAllPass(
        AllCodes(fmt::format(R"("storage": "raw", "format": "{}", "scale": 0.5,
                                         "load_dtype": "{}", "expect_saturated": 0)",
                             format, format),
                 R"([{"save": "tp=4", "load": "tp=1"}, {"save": "tp=2", "load": "tp=8,dp=2"}])"));
  }
}

// Quantising into an FP8 request with scale 2: the e4m3fn values above 224
// (240, 256, ..., 448 and their negatives) saturate, 16 of them, whatever the
// storage and topology; e5m2 codes into e4m3fn: the 28 finite values above 448
// and infinity, per sign.
TEST(Fp8SectionTest, QuantisingIntoFp8RequestsCountsSaturation) {
  const char* pairs =
      R"([{"save": "tp=4", "load": "tp=2,dp=2"}, {"save": "tp=1", "load": "tp=8"}])";
  for (const char* storage : {"raw", "dequantized"}) {
    SCOPED_TRACE(storage);
    ExpectAllPass(
        AllCodes(fmt::format(R"("storage": "{}", "load_dtype": "fp8_e4m3fn", "load_scale": 2,
                                         "expect_saturated": 16)",
                             storage),
                 pairs));
    ExpectAllPass(AllCodes(fmt::format(R"("storage": "{}", "format": "fp8_e5m2", "dtype": "f32",
                                         "load_dtype": "fp8_e4m3fn", "expect_saturated": 58)",
                                       storage),
                           pairs));
  }
  Scenario wrong =
      AllCodes(R"("load_dtype": "fp8_e4m3fn", "load_scale": 2, "expect_saturated": 15)",
               R"([{"save": "tp=2", "load": "tp=4"}])");
  std::vector<PairResult> results = RunScenario(wrong, RunOptions{});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(results[0].reason.find("fp8 key 'w': 16 values saturated, expected 15"),
            std::string::npos)
      << results[0].reason;
  EXPECT_EQ(results[0].load_report.fp8_saturated.at("w"), 16);
}

TEST(Fp8SectionTest, DequantisesIntoFloatRequestsAndDetectsWrongValues) {
  ExpectAllPass(AllCodes(R"("storage": "raw", "scale": 4, "load_dtype": "f32")",
                         R"([{"save": "tp=4", "load": "tp=2"}])"));
  ExpectAllPass(Parse(R"({"fp8": {"tensors": [{"key": "r", "shape": [6, 10], "shard": {"1": "tp"},
      "split": "chunk", "format": "fp8_e5m2", "scale": 3, "load_dtype": "f32"}]},
      "topologies": ["tp=1", "tp=3", "tp=4,dp=2"]})"));
  // A loaded element that differs is reported with its key and rank.
  Scenario s = AllCodes(R"("storage": "raw", "load_dtype": "f32")", "[]");
  Topology topo = Topology::Parse("tp=2");
  Node loaded;
  loaded["fp8"] = BuildFp8SaveState(s, topo, 1);
  for (auto& [key, node] : loaded["fp8"].as<Dict>()) node = Node(node.as<ShardedTensor>().data);
  loaded["fp8"]["w"].as<Tensor>().data_as<uint8_t>()[3] ^= 1;
  Fp8Check check = CheckFp8Loaded(s, nullptr, topo, 1, loaded);
  ASSERT_TRUE(check.error);
  EXPECT_NE(check.error->find("fp8 key 'w' (rank 1, shard at (8, 0)): element 3"),
            std::string::npos)
      << *check.error;
  EXPECT_EQ(loaded["fp8"]["w"].as<Tensor>().dtype(), DType::kF32);  // dequantised in place
}

}  // namespace
}  // namespace distckpt
