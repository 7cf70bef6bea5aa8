// Runs every scenario file in scenarios/ with in-process ranks: each pair
// (or, without pairs, the whole topology matrix) must meet its expectation.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/error_testing.h"
#include "harness/expand/expand.h"
#include "harness/expand/rank_state.h"
#include "harness/run/runner.h"
#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(DISTCKPT_SCENARIO_DIR)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ScenarioFileTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioFileTest, EveryPairMeetsItsExpectation) {
  Scenario scenario = Scenario::FromFile(GetParam());
  std::vector<PairResult> results = RunScenario(scenario, RunOptions{});
  ASSERT_FALSE(results.empty()) << GetParam() << " ran no pair";
  for (const PairResult& r : results) {
    EXPECT_TRUE(r.ok) << r.save << " -> " << r.load << ": " << r.reason;
  }
}

// Every parameter and object of every rank, with its metadata.
std::string Expanded(const RankState& state) {
  std::string out;
  for (const Param& p : state.params) {
    out += p.path + ":";
    for (const ShardedTensor& t : p.pieces) out += " " + t.ToString();
    out += "\n";
  }
  for (const ObjectParam& o : state.objects) out += o.path + ": " + o.object.ToString() + "\n";
  return out;
}

// Scenario::ToJson writes every field FromJson read: the written file
// expands, on both sides of the first pair, to the same state on every rank.
TEST_P(ScenarioFileTest, ToJsonWritesAFileThatExpandsTheSame) {
  const Scenario s = Scenario::FromFile(GetParam());
  const nlohmann::json written = s.ToJson("written");
  const Scenario back = Scenario::FromJson(written, "written");
  EXPECT_EQ(back.ToJson("written"), written);
  ASSERT_EQ(back.pairs.size(), s.pairs.size());
  ASSERT_EQ(back.fp8.size(), s.fp8.size());
  for (size_t i = 0; i < s.fp8.size(); ++i) {
    EXPECT_EQ(back.fp8[i].fp8.scale, s.fp8[i].fp8.scale);
    EXPECT_EQ(back.fp8[i].fp8.storage, s.fp8[i].fp8.storage);
    EXPECT_EQ(back.fp8[i].fp8.expect_saturated, s.fp8[i].fp8.expect_saturated);
  }
  EXPECT_EQ(back.topologies, s.topologies);
  if (s.pairs.empty()) return;
  const PairSpec &pair = s.pairs[0], &back_pair = back.pairs[0];
  EXPECT_EQ(back_pair.strict, pair.strict);
  EXPECT_EQ(back_pair.expect_error, pair.expect_error);
  EXPECT_EQ(back_pair.load_drop, pair.load_drop);
  for (const bool save : {true, false}) {
    const Topology topo = Topology::Parse(save ? pair.save : pair.load);
    for (int r = 0; r < topo.world_size(); ++r) {
      auto expand = [&](const Scenario& sc, const PairSpec& p) {
        try {
          return save ? Expanded(ExpandRank(sc, topo, r))
                      : Expanded(
                            ExpandRank(sc, topo, r, p.load_model, p.load_optimizer, p.load_fsdp));
        } catch (const CheckpointError& e) {
          return std::string("refused: ") + e.what();
        }
      };
      ASSERT_EQ(expand(back, back_pair), expand(s, pair))
          << (save ? "save " : "load ") << topo.ToString() << " rank " << r;
    }
  }
}

// StateBytes, the runner's memory check, counts what the saves make: under
// every topology of every file, the bytes of every rank's tensors (and
// factories' data) BuildSaveState returns outside its "fp8" section; a
// topology one refuses, both do.
TEST_P(ScenarioFileTest, StateBytesCountsWhatTheSavesMake) {
  const Scenario s = Scenario::FromFile(GetParam());
  std::vector<std::string> topologies = s.topologies;
  for (const PairSpec& pair : s.pairs) topologies.push_back(pair.save);
  for (const std::string& text : topologies) {
    const Topology topo = Topology::Parse(text);
    uint64_t made = 0;
    try {
      for (int r = 0; r < topo.world_size(); ++r) {
        const Node state = BuildSaveState(s, nullptr, topo, r);
        for (const auto& [name, part] : state.as<Dict>()) {
          if (name == "fp8") continue;
          ForEachLeaf(part, [&](const NodePath&, const Node& leaf) {
            if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) made += t->data.nbytes();
            if (const ShardedTensorFactory* f = leaf.get_if<ShardedTensorFactory>())
              made += f->data.nbytes();
          });
        }
      }
    } catch (const CheckpointError& e) {
      EXPECT_THROW(StateBytes(s, topo), CheckpointError) << text << ": " << e.what();
      continue;
    }
    EXPECT_TRUE(made > 0 || !s.fp8.empty()) << text << ": no tensor counted";
    EXPECT_EQ(StateBytes(s, topo), made) << text;
  }
}

// A scenario past the machine's memory (here a budget of 1 MiB) is refused
// before any step, naming the topology and both sizes: every rank's shards
// count (8 replicas of 256 KiB); one within it runs; a topology that cannot
// split a tensor is left to fail its pairs as before.
TEST(RunScenarioTest, RefusesAScenarioPastTheMachinesMemoryBeforeAnyStep) {
  RunOptions options;
  options.memory_bytes = 1 << 20;
  const Scenario big = Scenario::FromJson(
      nlohmann::json::parse(
          R"({"name": "big", "tensors": [{"key": "w", "shape": [65536]}], "topologies": ["tp=1", "dp=8"]})"),
      "big.json");
  EXPECT_THAT([&] { RunScenario(big, options); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "scenario 'big' needs at least 2097152 bytes (0.0 GiB) of tensors "
                          "under topology dp=8 (every rank's shards), more than the 1048576 bytes "
                          "(0.0 GiB) of this machine's memory"));
  const Scenario fits = Scenario::FromJson(
      nlohmann::json::parse(
          R"({"tensors": [{"key": "w", "shape": [65536]}], "topologies": ["tp=1", "dp=4"]})"),
      "fits.json");
  for (const PairResult& r : RunScenario(fits, options)) EXPECT_TRUE(r.ok) << r.reason;
  const Scenario uneven = Scenario::FromJson(
      nlohmann::json::parse(
          R"({"tensors": [{"key": "w", "shape": [3], "shard": {"0": "tp"}}], "topologies": ["tp=2"]})"),
      "uneven.json");
  const std::vector<PairResult> results = RunScenario(uneven, options);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_THAT(results[0].reason, ::testing::HasSubstr("cannot be split evenly"));
}

INSTANTIATE_TEST_SUITE_P(Files, ScenarioFileTest, ::testing::ValuesIn(ScenarioFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace distckpt
