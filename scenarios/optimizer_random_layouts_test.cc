// Random (src, dest) layouts of the optimizer formats on GPT shapes drawn at
// random: a model (layers, heads, hidden, ffn, vocab with padding, GLU, MoE
// experts) that both topologies can shard, Adam state in a random format
// with random bucket padding, saved under one topology (tp, pp, dp, cp, ep;
// world <= 12) and loaded under another with every element checked. Formats
// that may change TP/PP/EP get any pair; dp_reshardable keeps (TP, PP, EP)
// and changes DP x CP (and the padding divisor on load).
//
// DISTCKPT_RANDOM_SEED (default 4) and DISTCKPT_RANDOM_CASES (default 24)
// choose the cases; DISTCKPT_RANDOM_DUMP=DIR writes each case as a scenario
// file DIR/case-<i>.json, which `distckpt run FILE [--backend mpi]` replays.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "scenario/runner.h"

namespace distckpt {
namespace {

using nlohmann::json;

int64_t EnvInt(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : dflt;
}

struct Layout {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  std::string ToString() const {
    return "tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) + ",dp=" + std::to_string(dp) +
           ",cp=" + std::to_string(cp) + ",ep=" + std::to_string(ep);
  }
};

class CaseGenerator {
 public:
  explicit CaseGenerator(uint64_t seed) : rng_(seed) {}

  json Next(int index) {
    static const char* kFormats[] = {"plain", "fully_reshardable", "fully_sharded_model_space", "dp_reshardable"};
    const std::string format = kFormats[Pick(0, 3)];
    Layout src = RandomLayout();
    Layout dst = RandomLayout();
    if (format == "dp_reshardable") {  // DP x CP may change, (TP, PP, EP) may not
      for (int tries = 0; tries < 100; ++tries) {
        dst = RandomLayout();
        dst.tp = src.tp;
        dst.pp = src.pp;
        if (dst.tp * dst.pp * dst.dp * dst.cp <= 12 && (dst.dp * dst.cp) % src.ep == 0) break;
      }
      if ((dst.dp * dst.cp) % src.ep != 0 || dst.tp * dst.pp * dst.dp * dst.cp > 12) dst = src;
      dst.ep = src.ep;
    }
    const int tp = std::lcm(src.tp, dst.tp), pp = std::lcm(src.pp, dst.pp), ep = std::lcm(src.ep, dst.ep);
    const int heads = tp * Pick(1, 2);
    json model = {{"kind", "gpt"},
                  {"layers", pp * Pick(1, 2)},
                  {"heads", heads},
                  {"hidden", heads * Pick(1, 3) * 2},
                  {"ffn", tp * Pick(1, 5) * 2},
                  {"vocab", Pick(17, 120)},
                  {"vocab_multiple", Pick(0, 1) ? 8 : 16},
                  {"dtype", Pick(0, 2) ? "bf16" : "f32"},
                  {"glu", Pick(0, 1) == 1},
                  {"tied", Pick(0, 3) == 0}};
    if (Pick(0, 2) == 0 || src.ep > 1 || dst.ep > 1) {
      model["experts"] = ep * Pick(1, 2);
      model["moe_layer_freq"] = Pick(1, 2);
    }
    json optimizer = {{"kind", "adam"},
                      {"format", format},
                      {"step", Pick(1, 100)},
                      {"pad_divisor", PadDivisor()},
                      {"bucket_numel", Pick(0, 1) ? 0 : Pick(200, 3000)}};
    json pair = {{"save", src.ToString()}, {"load", dst.ToString()}};
    if (format != "plain" && format != "fully_reshardable" && Pick(0, 1)) {
      pair["load_optimizer"] = {{"pad_divisor", PadDivisor()}};
    }
    return {{"name", "optimizer-random-" + std::to_string(index)},
            {"seed", Pick(1, 1000)},
            {"model", model},
            {"optimizer", optimizer},
            {"pairs", json::array({pair})}};
  }

 private:
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int PadDivisor() {
    static const int kDivisors[] = {8, 40, 44, 56, 64, 128};
    return kDivisors[Pick(0, 5)];
  }
  Layout RandomLayout() {
    for (;;) {
      Layout l{Pick(1, 4), Pick(1, 3), Pick(1, 4), Pick(1, 2), 1};
      if (l.tp * l.pp * l.dp * l.cp > 12) continue;
      std::vector<int> eps;
      for (int e = 1; e <= l.dp * l.cp; ++e) {
        if ((l.dp * l.cp) % e == 0) eps.push_back(e);
      }
      l.ep = Pick(0, 2) == 0 ? eps[Pick(0, static_cast<int>(eps.size()) - 1)] : 1;
      return l;
    }
  }
  std::mt19937_64 rng_;
};

TEST(OptimizerRandomLayoutsTest, EveryFormatLoadsUnderAnotherLayout) {
  const uint64_t seed = static_cast<uint64_t>(EnvInt("DISTCKPT_RANDOM_SEED", 4));
  const int64_t cases = EnvInt("DISTCKPT_RANDOM_CASES", 24);
  const char* dump = std::getenv("DISTCKPT_RANDOM_DUMP");
  CaseGenerator gen(seed);
  std::map<std::string, int> formats;
  for (int64_t i = 0; i < cases; ++i) {
    json scenario = gen.Next(static_cast<int>(i));
    if (dump && *dump) {
      std::filesystem::create_directories(dump);
      std::ofstream(std::string(dump) + "/case-" + std::to_string(i) + ".json") << scenario.dump(1) << "\n";
    }
    ++formats[scenario["optimizer"]["format"].get<std::string>()];
    std::vector<PairResult> results = RunScenario(Scenario::FromJson(scenario, "case " + std::to_string(i)), {});
    ASSERT_EQ(results.size(), 1u);
    EXPECT_TRUE(results[0].ok) << "seed " << seed << " case " << i << ": " << results[0].reason << "\n"
                               << scenario.dump();
  }
  if (cases >= 24) {
    EXPECT_EQ(formats.size(), 4u) << "every format drawn";
  }
}

}  // namespace
}  // namespace distckpt
