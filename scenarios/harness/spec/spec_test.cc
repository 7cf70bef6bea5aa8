#include "harness/spec/spec.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error_testing.h"
#include "harness/spec/limits.h"

namespace distckpt {
namespace {

using nlohmann::json;

Scenario Parse(const std::string& text) { return Scenario::FromJson(json::parse(text), "t.json"); }

TEST(SpecTest, ParsesTensorsObjectsTopologiesAndPairs) {
  Scenario s = Parse(R"({"name": "n", "seed": 3,
    "tensors": [{"key": "w", "shape": [8, 4], "dtype": "bf16", "shard": {"0": ["tp", "dp"], "1": "pp"},
                 "split": "chunk"},
                {"key": "f", "shape": [6], "flatten": "dp", "pad_multiple": 4, "load_dtype": "float16"}],
    "objects": [{"key": "rng", "per": ["pp", "tp"]}],
    "topologies": ["tp=2", "pp=2,dp=2"],
    "pairs": [{"save": "tp=2", "load": "tp=1", "strict": "raise_all", "expect": {"error": "x"},
               "break": {"key": "w", "kind": "gap", "rank": 1}, "load_drop": ["f"]}]})");
  EXPECT_EQ(s.seed, 3u);
  ASSERT_EQ(s.tensors.size(), 2u);
  EXPECT_EQ(s.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(s.tensors[0].shard.at(0), (std::vector<MeshDim>{MeshDim::kTp, MeshDim::kDp}));
  EXPECT_EQ(s.tensors[0].split, SplitKind::kChunk);
  EXPECT_EQ(s.tensors[1].flatten, MeshDim::kDp);
  EXPECT_EQ(s.tensors[1].load_dtype, DType::kF16);
  EXPECT_EQ(s.objects[0].per, (std::vector<MeshDim>{MeshDim::kPp, MeshDim::kTp}));
  ASSERT_EQ(s.pairs.size(), 1u);
  EXPECT_EQ(s.pairs[0].strict, StrictHandling::kRaiseAll);
  EXPECT_EQ(s.pairs[0].expect_error, "x");
  EXPECT_EQ(s.pairs[0].break_save->rank, 1);
}

TEST(SpecTest, ErrorsNameTheJsonPath) {
  EXPECT_THAT([] { Parse(R"({"tensors": [{"key": "w", "shape": [2], "colour": 1}]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.tensors[0]: unknown field 'colour'"));
  EXPECT_THAT([] { Parse(R"({"tensors": [{"key": "w", "shape": [2], "dtype": "f7"}]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.tensors[0].dtype"));
  EXPECT_THAT([] { Parse(R"({"tensors": [{"key": "w", "shape": [2], "shard": {"1": "tp"}}]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "'1' is not an axis of shape (2,)"));
  EXPECT_THAT(
      [] {
        Parse(R"({"tensors": [{"key": "w", "shape": [2, 2], "shard": {"0": "tp", "1": "tp"}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "mesh dim tp splits two axes"));
  EXPECT_THAT(
      [] { Parse(R"({"tensors": [{"key": "w", "shape": [2], "stack": {"shape": [0]}}]})"); },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "$.tensors[0].stack.shape sizes: expected an integer from 1 to 4096"));
  EXPECT_THAT(
      [] {
        Parse(
            R"({"tensors": [{"key": "w", "shape": [2], "stack": {"shape": [2], "over": "dp"}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "$.tensors[0].stack.over: only \"pp\" distributes a stack"));
  EXPECT_THAT(
      [] {
        Parse(
            R"({"tensors": [{"key": "w", "shape": [2], "shard": {"0": "pp"}, "stack": {"shape": [2], "over": "pp"}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "$.tensors[0].stack.over: pp already shards axis 0"));
  EXPECT_THAT(
      [] {
        Parse(R"({"fp8": {"tensors": [{"key": "q", "shape": [2], "stack": {"shape": [2]}}]}})");
      },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "fp8 tensors with prepended axes are not supported"));
  EXPECT_THAT([] { Parse(R"({"topologies": ["tp=0"]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.topologies[0]"));
  EXPECT_THAT(
      [] { Parse(R"({"pairs": [{"save": "tp=1", "load": "tp=1", "strict": "sometimes"}]})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "Invalid strict flag"));
  EXPECT_THAT(
      [] { Parse(R"({"tensors": [{"key": "w", "shape": [2]}, {"key": "w", "shape": [3]}]})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "duplicate tensor key 'w'"));
  EXPECT_THAT(
      [] {
        Parse(
            R"({"tensors": [{"key": "w", "shape": [4], "shard": {"0": "dp"}, "flatten": "dp"}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "dp already shards axis 0"));
}

TEST(SpecTest, ParsesDamageVerifyLoadedOrRefusedAndPerRankDrops) {
  Scenario s = Parse(R"({"pairs": [
      {"save": "tp=2", "load": "tp=1", "damage": {"file": "__0_0.bin", "at": 5, "value": 255},
       "verify": "always", "expect": "loaded_or_refused"},
      {"save": "tp=2", "load": "tp=1", "damage": {"file": "metadata.json", "truncate": 0}}]})");
  ASSERT_EQ(s.pairs.size(), 2u);
  EXPECT_EQ(s.pairs[0].damage->file, "__0_0.bin");
  EXPECT_EQ(s.pairs[0].damage->at, 5);
  EXPECT_EQ(s.pairs[0].damage->value, 255);
  EXPECT_FALSE(s.pairs[0].damage->truncate);
  EXPECT_EQ(s.pairs[0].verify, VerifyPolicy::kAlways);
  EXPECT_TRUE(s.pairs[0].expect_loaded_or_refused);
  EXPECT_EQ(s.pairs[1].damage->truncate, 0);
  EXPECT_EQ(s.pairs[1].verify, VerifyPolicy::kWhenWhole);
  EXPECT_FALSE(s.pairs[1].expect_loaded_or_refused);
  const auto pair = [](const std::string& fields) {
    return R"({"pairs": [{"save": "tp=1", "load": "tp=1", )" + fields + "}]}";
  };
  EXPECT_THAT(
      [&] { Parse(pair(R"("damage": {"file": "../metadata.json", "at": 0, "value": 1})")); },
      ThrowsError(
          ErrorKind::kInvalidArgument,
          "$.pairs[0].damage.file: '../metadata.json' is not a file name inside the checkpoint"));
  EXPECT_THAT([&] { Parse(pair(R"("damage": {"file": "..", "truncate": 1})")); },
              ThrowsError(ErrorKind::kInvalidArgument, "is not a file name inside the checkpoint"));
  EXPECT_THAT(
      [&] { Parse(pair(R"("damage": {"file": "a.bin", "at": 0, "value": 1, "truncate": 1})")); },
      ThrowsError(ErrorKind::kInvalidArgument, "give either \"at\" and \"value\" or \"truncate\""));
  EXPECT_THAT([&] { Parse(pair(R"("damage": {"file": "a.bin", "at": 0, "value": 256})")); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.pairs[0].damage.value: must be a byte"));
  EXPECT_THAT([&] { Parse(pair(R"("damage": {"file": "a.bin", "at": -1, "value": 0})")); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.pairs[0].damage.at: must be >= 0"));
  // Integers past their type: 2^64 - 1 is not -1 (it wrapped, and "at"
  // passed as the byte before the end), 2^32 + 1 is not rank 1.
  EXPECT_THAT(
      [&] {
        Parse(pair(R"("damage": {"file": "a.bin", "at": 18446744073709551615, "value": 0})"));
      },
      ThrowsError(ErrorKind::kInvalidArgument, "$.pairs[0].damage.at: expected an integer from"));
  EXPECT_THAT(
      [&] { Parse(pair(R"("break": {"key": "w", "kind": "gap", "rank": 4294967297})")); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.pairs[0].break.rank: expected an integer"));
  EXPECT_THAT(
      [&] { Parse(pair(R"("load_drop": [{"key": "w", "ranks": [1]}])")); },
      ThrowsError(
          ErrorKind::kInvalidArgument,
          "$.pairs[0].load_drop[0].ranks: expected ranks of the load topology tp=1 (0 to 0)"));
  EXPECT_THAT(
      [&] { Parse(pair(R"("load_drop": [3])")); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.pairs[0].load_drop[0]: expected a key or"));
  const Scenario drops = Parse(pair(R"("load_drop": ["a", {"key": "w", "ranks": [0]}])"));
  EXPECT_TRUE(drops.pairs[0].Drops("a", 0));
  EXPECT_TRUE(drops.pairs[0].Drops("w", 0));
  EXPECT_FALSE(drops.pairs[0].Drops("w", 1));
  EXPECT_FALSE(drops.pairs[0].Drops("b", 0));
  EXPECT_EQ(Scenario::FromJson(drops.ToJson(), "again.json").ToJson(), drops.ToJson());
  EXPECT_THAT([&] { Parse(pair(R"("verify": "sometimes")")); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "$.pairs[0].verify: unknown verify policy 'sometimes'"));
  EXPECT_THAT([&] { Parse(pair(R"("expect": "maybe")")); },
              ThrowsError(ErrorKind::kInvalidArgument, "\"loaded_or_refused\""));
  // What ToJson writes parses back to the same pairs.
  Scenario again = Scenario::FromJson(s.ToJson(), "again.json");
  EXPECT_EQ(again.ToJson(), s.ToJson());
  EXPECT_EQ(again.pairs[0].damage->value, 255);
  EXPECT_EQ(again.pairs[1].damage->truncate, 0);
  EXPECT_EQ(again.pairs[0].verify, VerifyPolicy::kAlways);
  EXPECT_TRUE(again.pairs[0].expect_loaded_or_refused);
}

TEST(SpecTest, ParsesOptimizerAndFsdpSectionsAndPairOverrides) {
  Scenario s = Parse(
      R"({"model": {"kind": "gpt"},
          "optimizer": {"kind": "adam", "format": "dp_reshardable", "step": 4, "pad_divisor": 56},
                         "pairs": [{"save": "dp=2", "load": "dp=3", "load_optimizer": {"pad_divisor": 40}}]})");
  ASSERT_TRUE(s.optimizer);
  EXPECT_EQ(s.optimizer->format, OptimFormat::kDpReshardable);
  EXPECT_EQ(s.optimizer->step, 4);
  EXPECT_EQ(s.optimizer->pad_divisor, 56);
  EXPECT_EQ(s.pairs[0].load_optimizer["pad_divisor"], 40);
  // FSDP with a model-space optimizer format.
  Scenario f = Parse(
      R"({"model": {"kind": "gpt"}, "optimizer": {"kind": "adam", "format": "fully_reshardable"},
                         "fsdp": {"layout": "fsdp2"},
                         "pairs": [{"save": "dp=2", "load": "dp=4,dp_shard=2",
                                    "load_fsdp": {"layout": "megatron"}}]})");
  EXPECT_EQ(f.fsdp, FsdpLayout::kFsdp2);
  EXPECT_EQ(f.pairs[0].load_fsdp, FsdpLayout::kMegatron);
  EXPECT_THAT([] { Parse(R"({"optimizer": {"kind": "sgd"}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.optimizer.kind"));
  EXPECT_THAT([] { Parse(R"({"optimizer": {"format": "fully_sharded_bucket_space"}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.optimizer.format"));
  EXPECT_THAT(
      [] {
        Parse(R"({"pairs": [{"save": "dp=1", "load": "dp=1", "load_optimizer": {"step": 2}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "unknown field 'step'"));
  EXPECT_THAT([] { Parse(R"({"fsdp": {"layout": "zero3"}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.fsdp.layout"));
  EXPECT_THAT([] { Parse(R"({"fp8": {}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.fp8.tensors"));
  // FSDP shards optimizer state in model space: bucket-space formats are refused, not ignored.
  EXPECT_THAT(
      [] {
        Parse(R"({"model": {"kind": "gpt"}, "fsdp": {"layout": "megatron"},
                  "optimizer": {"kind": "adam", "format": "dp_reshardable"}})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "$.optimizer.format: 'dp_reshardable'"));
  EXPECT_THAT(
      [] {
        Parse(
            R"({"model": {"kind": "gpt"}, "optimizer": {"kind": "adam", "format": "fully_sharded_model_space"},
                  "pairs": [{"save": "dp=2", "load": "dp=2", "load_fsdp": {"layout": "fsdp2"}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "cannot be combined with fsdp"));
}

TEST(SpecTest, OptimizerWithoutModelOrWithTensorsIsRefused) {
  // Before: an optimizer over plain tensors silently saved an empty optimizer.
  EXPECT_THAT(
      [] { Parse(R"({"tensors": [{"key": "w", "shape": [4]}], "optimizer": {"kind": "adam"}})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.optimizer: the optimizer section applies"));
  EXPECT_THAT([] { Parse(R"({"optimizer": {"kind": "adam"}})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "has no model"));
  EXPECT_THAT(
      [] {
        Parse(R"({"model": {"kind": "gpt"}, "tensors": [{"key": "w", "shape": [4]}],
                  "optimizer": {"kind": "adam"}})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "would get no optimizer state"));
  EXPECT_THAT([] { Parse(R"({"tensors": [{"key": "w"}]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "missing field 'shape'"));
}

TEST(SpecTest, SizesAndCountsPastTheirBoundsAreRefused) {
  // Before: such numbers reached 64-bit arithmetic (signed overflow) or
  // per-layer tables (a 10^13-layer model asked for 1.6 TB).
  const std::string too_big = std::to_string(kMaxScenarioSize + 1);
  EXPECT_THAT([&] { Parse(R"({"tensors": [{"key": "w", "shape": [2, )" + too_big + "]}]}"); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "$.tensors[0].shape sizes: expected an integer from 0 to 1099511627776"));
  EXPECT_THAT([] { Parse(R"({"tensors": [{"key": "w", "shape": [18446744073709551615]}]})"); },
              ThrowsError(ErrorKind::kInvalidArgument, "$.tensors[0].shape sizes"));
  EXPECT_THAT(
      [] { Parse(R"({"tensors": [{"key": "w", "shape": [1099511627776, 1099511627776]}]})"); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.tensors[0].shape: shape (1099511627776, "));
  EXPECT_THAT(
      [] {
        Parse(R"({"tensors": [{"key": "w", "shape": [4294967296, 4194304],
                                "stack": {"shape": [4096]}}]})");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "has too many elements"));
  EXPECT_THAT(
      [] { Parse(R"({"tensors": [{"key": "w", "shape": [2], "stack": {"shape": [64, 65]}}]})"); },
      ThrowsError(ErrorKind::kInvalidArgument,
                  "$.tensors[0].stack.shape: more than 4096 stacked entries"));
  EXPECT_THAT(
      [&] {
        Parse(R"({"tensors": [{"key": "w", "shape": [2], "pad_multiple": )" + too_big + "}]}");
      },
      ThrowsError(ErrorKind::kInvalidArgument, "$.tensors[0].pad_multiple: expected an integer"));
  for (const char* field : {"layers", "experts"}) {
    EXPECT_THAT([&] { Parse(fmt::format(R"({{"model": {{"{}": 4097}}}})", field)); },
                ThrowsError(ErrorKind::kInvalidArgument,
                            fmt::format("$.model.{}: expected an integer from", field)));
  }
  for (const char* field : {"hidden", "ffn", "heads", "query_groups", "vocab", "vocab_multiple"}) {
    EXPECT_THAT([&] { Parse(fmt::format(R"({{"model": {{"{}": {}}}}})", field, too_big)); },
                ThrowsError(ErrorKind::kInvalidArgument,
                            fmt::format("$.model.{}: expected an integer from", field)));
  }
  EXPECT_THAT([] { Parse(R"({"model": {"layers": 257, "experts": 256}})"); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "$.model: 257 layers of 256 experts exceed 65536 expert layers"));
  EXPECT_EQ(Parse(R"({"model": {"layers": 256, "experts": 256}})").models[0].experts, 256);
  EXPECT_THAT(
      [&] { Parse(R"({"model": {}, "optimizer": {"pad_divisor": )" + too_big + "}}"); },
      ThrowsError(ErrorKind::kInvalidArgument, "$.optimizer.pad_divisor: expected an integer"));
  // At the bounds: accepted.
  Scenario s = Parse(R"({"tensors": [{"key": "w", "shape": [1099511627776],
                                       "stack": {"shape": [4096]}}],
                         "model": {"layers": 4096, "vocab": 1099511627776}})");
  EXPECT_EQ(s.tensors[0].shape[0], kMaxScenarioSize);
  EXPECT_EQ(s.models[0].layers, kMaxScenarioCount);
}

TEST(SpecTest, MissingFileIsAnInputError) {
  EXPECT_THAT(
      [] { Scenario::FromFile("/nonexistent/s.json"); },
      ThrowsError(ErrorKind::kInvalidArgument, "cannot open scenario file /nonexistent/s.json"));
}

}  // namespace
}  // namespace distckpt
