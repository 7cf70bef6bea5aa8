#include "harness/tools/verify.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "comm/thread_world.h"
#include "core/error.h"
#include "core/error_testing.h"
#include "engine/checkpoint_diff.h"
#include "engine/save.h"
#include "format/dcp/pickler.h"
#include "format/dcp/torch_save.h"
#include "harness/run/runner.h"
#include "harness/tools/request_spec.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// Counts the files opened for reading other than the checkpoint's
// metadata (metadata.json, .metadata).
class CountingEnv : public ForwardingEnv {
 public:
  CountingEnv() : ForwardingEnv(Env::Default()) {}
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& p) override {
    std::string name = fs::path(p).filename().string();
    if (name != "metadata.json" && name != ".metadata") ++data_opens;
    return target()->NewRandomAccessFile(p);
  }
  std::atomic<int> data_opens{0};
};

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("distckpt-verify-{}-{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Save(const Scenario& s, const std::string& topology, const std::string& name,
                   const std::string& format = "native") {
    std::string dir = (dir_ / name).string();
    const Format& f = FormatByName(format);
    std::vector<StepReport> reports(Topology::Parse(topology).world_size());
    RunRanks(reports.size(), [&](Communicator& comm) {
      reports[comm.rank()] = SaveStep(s, nullptr, topology, dir, comm, &f);
    });
    EXPECT_TRUE(reports[0].ok) << reports[0].error;
    return dir;
  }

  // The verdict and message a real load gives.
  StepReport LoadVerdict(const Scenario& s, const std::string& saved, const std::string& topology,
                         const std::string& dir, StrictHandling strict) {
    std::vector<StepReport> reports(Topology::Parse(topology).world_size());
    RunRanks(reports.size(), [&](Communicator& comm) {
      reports[comm.rank()] = LoadStep(s, nullptr, saved, topology, dir, comm, strict);
    });
    return reports[0];
  }

  fs::path dir_;
};

Scenario ManyTensors(int count) {
  json tensors = json::array();
  for (int i = 0; i < count; ++i) {
    tensors.push_back(
        {{"key", fmt::format("layer{}.weight", i)}, {"shape", {8, 4}}, {"shard", {{"0", "tp"}}}});
  }
  return Scenario::FromJson({{"name", "many"}, {"tensors", tensors}}, "many");
}

TEST_F(VerifyTest, ThousandTensorsOpenNoDataFileAndTakeUnderOneSecond) {
  Scenario s = ManyTensors(1000);
  std::string dir = Save(s, "tp=2", "many");
  CountingEnv env;
  VerifyOptions options;
  options.env = &env;
  auto start = std::chrono::steady_clock::now();
  VerifyResult r = VerifyLoad(s, dir, "tp=4,dp=2", options);
  double eight_ranks =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  start = std::chrono::steady_clock::now();
  EXPECT_TRUE(VerifyLoad(s, dir, "tp=4", options).ok);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(env.data_opens, 0);
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.tensors, 8000u);  // every rank requests every key (replicated over dp)
  EXPECT_EQ(r.bytes_needed, 1000u * 8 * 4 * 4 * 2);  // two dp replicas read everything
  EXPECT_LT(seconds, 1.0);
  std::cout << fmt::format(
      "verify of 1000 tensors: tp=4 {:.3f} s, tp=4,dp=2 {:.3f} s, {} data files opened\n", seconds,
      eight_ranks, env.data_opens.load());
  // A load opens data files; the counter sees them.
  LoadVerdict(s, "tp=2", "tp=4,dp=2", dir, StrictHandling::kAssumeOkUnexpected);
  EXPECT_TRUE(DiffCheckpoints(dir, dir, {}, &env).identical());
  EXPECT_GT(env.data_opens, 0);
}

TEST_F(VerifyTest, RefusalsCarryTheLoadsMessage) {
  Scenario s = Scenario::FromFile(DISTCKPT_SOURCE_DIR "/scenarios/tensors.json");
  std::string dir = Save(s, "tp=2,pp=2", "tensors");
  for (const std::string t : {"tp=3", "tp=4,pp=2", "dp=3"}) {
    VerifyResult r = VerifyLoad(s, dir, t);
    StepReport load = LoadVerdict(s, "tp=2,pp=2", t, dir, s.strict);
    EXPECT_EQ(r.ok, load.ok) << t << ": " << r.error << " / " << load.error;
  }
  // Divisibility: named key, axis and sizes.
  json bad = {{"name", "bad"},
              {"tensors", {{{"key", "layer.weight"}, {"shard", {{"0", "tp"}, {"1", "pp"}}}}}}};
  Env* env = Env::Default();
  const CheckpointMetadata md = DetectFormat(env, dir).OpenReader(env, dir)->metadata();
  Scenario spec = SpecFromJson(bad, "bad", md);
  EXPECT_EQ(spec.tensors[0].shape, (Shape{24, 36}));  // omitted shape from the checkpoint
  EXPECT_EQ(spec.tensors[0].dtype, DType::kF32);
  VerifyResult r = VerifyLoad(spec, dir, "tp=5");
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("layer.weight"));
  EXPECT_THAT(r.error, HasSubstr("24"));
  // Strict mode: a requested key the checkpoint lacks, raise_all, the load's words.
  json extra = {{"name", "extra"},
                {"tensors",
                 {{{"key", "layer.weight"}, {"shard", {{"0", "tp"}}}},
                  {{"key", "not.saved"}, {"shape", {4}}}}}};
  Scenario with_extra = SpecFromJson(extra, "extra", md);
  VerifyOptions strict;
  strict.strict = StrictHandling::kRaiseAll;
  VerifyResult refused = VerifyLoad(with_extra, dir, "tp=2", strict);
  StepReport load = LoadVerdict(with_extra, "tp=2,pp=2", "tp=2", dir, StrictHandling::kRaiseAll);
  EXPECT_FALSE(refused.ok);
  EXPECT_FALSE(load.ok);
  EXPECT_EQ(refused.error, load.error);
  EXPECT_THAT(refused.error, HasSubstr("not.saved"));
  strict.strict = StrictHandling::kReturnAll;
  VerifyResult returned = VerifyLoad(with_extra, dir, "tp=2", strict);
  EXPECT_TRUE(returned.ok) << returned.error;
  EXPECT_EQ(returned.unexpected, "not.saved");
  EXPECT_THAT(returned.missing, HasSubstr("embedding.weight"));
  // A key not in the checkpoint cannot take its shape from it.
  json unknown = {{"tensors", {{{"key", "nope"}}}}};
  EXPECT_THROW(SpecFromJson(unknown, "u", md), CheckpointError);
}

TEST_F(VerifyTest, OptimizerFormatResumabilityAsALoad) {
  Scenario s = Scenario::FromFile(DISTCKPT_SOURCE_DIR "/scenarios/optimizer-dp-reshardable.json");
  std::string dir = Save(s, "tp=2,dp=2", "opt");
  VerifyResult same = VerifyLoad(s, dir, "tp=2,dp=1");
  VerifyResult other = VerifyLoad(s, dir, "tp=1,dp=2");
  StepReport load_other = LoadVerdict(s, "tp=2,dp=2", "tp=1,dp=2", dir, s.strict);
  EXPECT_TRUE(same.ok) << same.error;
  EXPECT_FALSE(other.ok);
  EXPECT_FALSE(load_other.ok);
  EXPECT_THAT(other.error, HasSubstr("dp_reshardable"));
}

TEST_F(VerifyTest, GptInferenceAndReshardGiveBackTheCheckpoint) {
  json model = {{"kind", "gpt"},       {"layers", 4},
                {"hidden", 8},         {"ffn", 16},
                {"heads", 4},          {"vocab", 100},
                {"vocab_multiple", 8}, {"glu", true},
                {"experts", 2},        {"moe_layer_freq", {0, 1, 0, 1}}};
  Scenario s = Scenario::FromJson({{"name", "g"}, {"model", model}}, "g");
  std::string dir = Save(s, "tp=2,pp=2", "gpt");
  Env* env = Env::Default();
  const CheckpointMetadata md = DetectFormat(env, dir).OpenReader(env, dir)->metadata();
  EXPECT_THAT([&] { InferGptModel(md, {}); },
              ThrowsError(ErrorKind::kInvalidArgument, "cannot infer 'heads'"));
  json inferred = InferGptModel(md, {{"heads", 4}});
  EXPECT_EQ(inferred["layers"], 4);
  EXPECT_EQ(inferred["hidden"], 8);
  EXPECT_EQ(inferred["ffn"], 16);
  EXPECT_EQ(inferred["glu"], true);
  EXPECT_EQ(inferred["experts"], 2);
  EXPECT_EQ(inferred["moe_layer_freq"], json({0, 1, 0, 1}));
  EXPECT_EQ(inferred["tied"], false);
  EXPECT_EQ(inferred["vocab"], 112);  // the stored padded rows (multiple of 8*2)
  Scenario spec = LoadRequestSpec("gpt", md, {{"heads", 4}});
  EXPECT_TRUE(VerifyLoad(spec, dir, "tp=4,dp=2").ok);
  VerifyResult odd = VerifyLoad(spec, dir, "tp=3");
  EXPECT_FALSE(odd.ok);
  EXPECT_THAT(odd.error, HasSubstr("hidden=8 is not divisible by tp=3"));

  // Reshard to tp=4 (real values, both formats), then diff against the
  // original. The padded vocab depends on TP (as in Megatron): a multiple
  // that keeps the stored 112 rows under tp=2 and tp=4 makes it the same.
  Scenario same_padding = LoadRequestSpec("gpt", md, {{"heads", 4}, {"vocab_multiple", 28}});
  for (const std::string format : {"native", "dcp"}) {
    std::string out = (dir_ / ("resharded-" + format)).string();
    RunRanks(4, [&](Communicator& comm) {
      ReshardRank(same_padding, dir, "tp=4", out, FormatByName(format),
                  StrictHandling::kAssumeOkUnexpected, comm);
    });
    CheckpointDiff diff = DiffCheckpoints(dir, out);
    // rng_state's grid is (pp, tp): not reshardable, left out of the new checkpoint.
    for (const std::string& key : diff.only_a) EXPECT_THAT(key, HasSubstr("rng_state"));
    EXPECT_FALSE(diff.only_a.empty());
    EXPECT_TRUE(diff.only_b.empty());
    EXPECT_TRUE(diff.mismatches.empty()) << diff.mismatches.front();
    EXPECT_GT(diff.tensors_compared, 10u);
    // The resharded checkpoint lacks rng_state, as Megatron's resave after a
    // TP/PP change does: a request for a real checkpoint asks only for the
    // objects it stores, so it loads under the first layout again.
    VerifyOptions strict;
    strict.strict = StrictHandling::kRaiseAll;
    VerifyResult back = VerifyLoad(spec, out, "tp=2,pp=2", strict);
    EXPECT_TRUE(back.ok) << back.error;
    EXPECT_THAT(back.unexpected, Not(HasSubstr("rng_state")));
  }
}

TEST_F(VerifyTest, GptInferenceReadsVocabAndPaddingFromMegatronsArgs) {
  json model = {{"kind", "gpt"}, {"layers", 2},  {"hidden", 8},         {"ffn", 16},
                {"heads", 4},    {"vocab", 100}, {"vocab_multiple", 32}};
  Scenario s = Scenario::FromJson({{"name", "g"}, {"model", model}}, "g");
  std::string dir = Save(s, "tp=1", "args");
  Env* env = Env::Default();
  CheckpointMetadata md = DetectFormat(env, dir).OpenReader(env, dir)->metadata();
  EXPECT_EQ(InferGptModel(md, {{"heads", 4}})["vocab"], 128);  // stored rows
  md.common["args"] = {{"__object__", "argparse.Namespace"},
                       {"args", json::array()},
                       {"state", {{"vocab_size", 100}, {"make_vocab_size_divisible_by", 32}}}};
  json inferred = InferGptModel(md, {{"heads", 4}});
  EXPECT_EQ(inferred["vocab"], 100);
  EXPECT_EQ(inferred["vocab_multiple"], 32);
}

TEST_F(VerifyTest, DataCheckNamesFileAndKeyOfAFlippedByte) {
  Scenario s = ManyTensors(3);
  std::string dir = Save(s, "tp=2", "data");
  DataCheck ok = VerifyData(dir);
  EXPECT_EQ(ok.chunks, 6u);
  EXPECT_EQ(ok.bytes, 3u * 8 * 4 * 4);
  EXPECT_TRUE(ok.verified());  // version 3: every chunk, object and the metadata checksummed
  EXPECT_EQ(ok.unverified_chunks + ok.unverified_objects, 0u);
  Env* env = Env::Default();
  const CheckpointMetadata md = DetectFormat(env, dir).OpenReader(env, dir)->metadata();
  const StoredChunk& chunk = md.tensors.at("layer1.weight").chunks.at(1);
  std::string path = (fs::path(dir) / chunk.file).string();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(chunk.offset + 5));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0xff);
    f.seekp(static_cast<std::streamoff>(chunk.offset + 5));
    f.write(&c, 1);
  }
  try {
    VerifyData(dir);
    FAIL() << "a flipped byte went unnoticed";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
    EXPECT_THAT(e.what(), HasSubstr(chunk.file));
    EXPECT_THAT(e.what(), HasSubstr("layer1.weight"));
  }
  EXPECT_TRUE(VerifyLoad(s, dir, "tp=1").ok);  // metadata only: damage is --data's job
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A DP-only reshard (TP and PP kept) writes the objects it does not change as
// they were stored, not re-encoded from their JSON values, which have no
// tuples, numpy arrays or globals: a rng_state written by torch (random's
// nested tuples, numpy's _reconstruct, a tensor) and a common state pickled
// with a tuple, a global and dict keys out of sorted order.
TEST_F(VerifyTest, DpOnlyReshardWritesUnchangedObjectsAsStored) {
  const std::string rng_record =
      ReadBytes(std::string(DISTCKPT_SOURCE_DIR) + "/fixtures/pickles/rng_state.pt");
  PickleWriter w;  // [{"iteration": 10, "shape": (2, (3,)), "dtype": torch.bfloat16}]
  w.List(false, [&] {
    w.Dict(false, [&] {
      w.Str("iteration");
      w.Int(10);
      w.Str("shape");
      w.Tuple(2, [&] {
        w.Int(2);
        w.TupleOfInts({3});
      });
      w.Str("dtype");
      w.Global("torch", "bfloat16");
    });
  });
  const std::string pickle = w.Finish();
  const std::string common_record = ZipToString([&](ZipWriter& zip) {
    zip.AddRecord("data.pkl", pickle);
    zip.AddRecord("byteorder", "little");
    zip.AddRecord("version", "3\n");
  });
  auto record = [](const std::string& bytes) {
    json value = TorchLoadJson(ZipReader(bytes, "record")).at(0);
    return std::make_shared<const ObjectRecord>(ObjectRecord{kTorchSaveEncoding, bytes, value});
  };
  const auto rng = record(rng_record), common = record(common_record);
  ASSERT_EQ(rng->value.at("random_rng_state").at(0), 3);  // JSON lists: the tuples are gone
  ASSERT_EQ(common->value.at("shape"), json({2, {3}}));

  // Saved under tp=2,dp=2 (DCP, Megatron's torch_dist layout: common state as an object).
  const std::string dir = (dir_ / "tp2dp2").string(), out = (dir_ / "tp2").string();
  RunRanks(4, [&](Communicator& comm) {
    const int tp = comm.rank() % 2, dp = comm.rank() / 2;
    Dict state;
    state["w"] = Node(ShardedTensor::FromRankOffsets("w", Tensor::Zeros(DType::kF32, {4, 4}),
                                                     {{0, tp, 2}}, {dp}));
    state["rng_state"] = Node(ShardedObject{"rng_state", rng->value, {1, 2}, {0, tp}, {dp}, rng});
    for (const auto& [key, value] : common->value.items()) state[key] = Node(value);
    SaveOptions options;
    options.format = &FormatByName("dcp");
    options.topology = "tp=2,dp=2";
    options.common_record = common;
    distckpt::Save(Node(std::move(state)), dir, comm, options);
  });
  Scenario spec = Scenario::FromJson(
      {{"name", "rng"},
       {"tensors", {{{"key", "w"}, {"shape", {8, 4}}, {"shard", {{"0", "tp"}}}}}},
       {"objects", {{{"key", "rng_state"}, {"per", {"pp", "tp"}}}}}},
      "rng");
  RunRanks(2, [&](Communicator& comm) {
    ReshardRank(spec, dir, "tp=2", out, FormatByName("dcp"), StrictHandling::kRaiseAll, comm);
  });

  Env* env = Env::Default();
  for (const std::string& ckpt : {dir, out}) {
    SCOPED_TRACE(ckpt);
    std::unique_ptr<CheckpointReader> reader = DetectFormat(env, ckpt).OpenReader(env, ckpt);
    ASSERT_EQ(reader->metadata().objects.size(), 2u);
    for (const auto& [unique_key, stored] : reader->metadata().objects) {
      std::shared_ptr<const ObjectRecord> got = reader->ReadObjectRecord(stored);
      EXPECT_TRUE(got->bytes == rng_record) << unique_key << " was re-encoded";
      EXPECT_EQ(got->value, rng->value);
    }
    ASSERT_NE(reader->CommonRecord(), nullptr);
    EXPECT_TRUE(reader->CommonRecord()->bytes == common_record)
        << "the common state was re-encoded";
    EXPECT_EQ(reader->metadata().common, common->value);
  }
}

}  // namespace
}  // namespace distckpt
