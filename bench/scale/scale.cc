// Internet scale by simulation: the metadata side of a save and of a
// resharded load at thousands of ranks, in one process, with no tensor bytes.
//
//   scale --world N [--optimizer dp_reshardable|fully_sharded_model_space|none]
//         [--moe] [--load-topology T] [--json OUT]
//
// The model is Llama-3-405B-shaped (126 layers, hidden 16384, ffn 53248, 128
// heads in 8 query groups, vocab 128256, SwiGLU, bf16), or with --moe a MoE
// variant (every layer MoE, 16 experts, ffn 16384, ep=8). Under tp=8, pp=16
// (and ep=8), dp = N / (tp*pp) [MoE: its expert DP follows]:
//
//   expand     every rank's sharded state (harness ExpandRank: GPT generator +
//              Adam / distributed optimizer), metadata only. Reported, not
//              part of the target: each rank does its own in a real job.
//   validate   the save's global validation over every rank's metadata
//              (ValidateShardingIntegrity: what the coordinator runs).
//   commit     every rank's written chunks (main replicas, as a plain save
//              writes them) merged into the checkpoint's metadata and
//              serialized as the native format's metadata.json text.
//   open       CheckChunkTiling over the merged metadata (what a reader does
//              on open).
//   plan       rank 0's request under the load topology (default tp=4,pp=8,
//              dp=N/32; tp=16 cannot split 8 query groups) preprocessed and planned against that
//              metadata (PlanShardedState: key lookup, shape, coverage, byte runs);
//              also for the last rank. `plan_s` is wall time, `plan_cpu_s` the
//              process's CPU time over it (the plan runs on one thread): on a
//              shared machine the wall time also counts the time others ran.
//
// Metadata size is that of native format v3: per chunk its block size and
// the checksum of its per-block checksums, which v3 keeps in the data files
// (8 bytes per block of at most 64 KiB: their count grows with bytes, not
// chunks). Their count, their bytes in the data files, and the JSON they took
// in format v2 (16 hex digits each) are reported apart (`block_checksums`,
// `block_checksum_data_file_bytes`, `block_checksum_json_bytes_v2`).
//
// Output: one JSON object (stdout, or --json OUT): seconds per phase, chunk and
// object counts, metadata bytes, bytes per chunk, peak RSS (VmHWM) after each
// phase, the load average at the end.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/read_state.h"
#include "format/block_checksums.h"
#include "format/checkpoint_metadata.h"
#include "format/format.h"
#include "format/native/metadata_json.h"
#include "harness/expand/expand.h"
#include "harness/expand/rank_state.h"
#include "harness/spec/spec.h"
#include "mapping/dict_utils.h"
#include "mapping/validation.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// A reader that has metadata and nothing else: planning never reads.
class MetadataOnlyReader : public CheckpointReader {
 public:
  explicit MetadataOnlyReader(const CheckpointMetadata& md) : md_(md) {}
  const CheckpointMetadata& metadata() const override { return md_; }
  void ReadChunk(const StoredTensor& t, const StoredChunk&, std::span<const ReadRun>,
                 VerifyPolicy) override {
    Fail(ErrorKind::kUnsupported, "scale simulation: no bytes to read ({})", t.key);
  }
  std::string ReadObject(const StoredObject& o) override {
    Fail(ErrorKind::kUnsupported, "scale simulation: no bytes to read ({})", o.key);
  }
  const ReadStats& stats() const override { return stats_; }
  void CheckStored(const StoredTensor&, const StoredChunk&) override {}  // no files: nothing read

 private:
  const CheckpointMetadata& md_;
  ReadStats stats_;
};

nlohmann::json ScenarioJson(const std::string& optimizer, bool moe) {
  nlohmann::json model = {{"kind", "gpt"},        {"layers", 126}, {"hidden", 16384},
                          {"ffn", 53248},         {"heads", 128},  {"query_groups", 8},
                          {"vocab", 128256},      {"glu", true},   {"dtype", "bf16"},
                          {"vocab_multiple", 128}};
  // 126 layers over 16 (save) or 8 (load) stages: the first stage also holds
  // the embedding and the last the loss, one decoder layer fewer each.
  auto layout = [](int stages) {
    nlohmann::json l = nlohmann::json::array();
    const int per = 128 / stages;
    for (int s = 0; s < stages; ++s) {
      nlohmann::json stage = nlohmann::json::array();
      if (s == 0) stage.push_back("embedding");
      const int n = per - (s == 0) - (s == stages - 1);
      for (int i = 0; i < n; ++i) stage.push_back("decoder");
      if (s == stages - 1) stage.push_back("loss");
      l.push_back(stage);
    }
    return l;
  };
  model["pipeline_layout"] = {layout(16), layout(8)};
  if (moe) {
    model["experts"] = 16;
    model["ffn"] = 16384;
  }
  nlohmann::json s = {{"name", moe ? "llama405b-moe-scale" : "llama405b-scale"},
                      {"seed", 1},
                      {"model", nlohmann::json::array({model})},
                      {"topologies", nlohmann::json::array({"tp=1"})}};
  if (optimizer != "none") s["optimizer"] = {{"kind", "adam"}, {"format", optimizer}, {"step", 1}};
  return s;
}

// The chunks rank `rank` writes in a plain save: its main replicas.
CheckpointMetadata WrittenBy(const RankState& state, int rank, uint64_t* block_checksums) {
  CheckpointMetadata md;
  const std::string file = fmt::format("__{}_0.distcp", rank);
  uint64_t offset = 0;
  for (const Param& p : state.params) {
    for (const ShardedTensor& t : p.pieces) {
      if (!IsMainReplica(t.replica_id)) continue;
      StoredChunk c;
      c.box = t.GlobalBox();
      c.flat = t.flattened_range;
      c.file = file;
      c.offset = offset;
      c.length = static_cast<uint64_t>(t.LocalNumel()) * DTypeSize(t.dtype);
      c.writer_rank = rank;
      c.block_size = ChooseBlockSize(c.length);
      c.sums_checksum = 0xfedcba9876543210ull;  // any value: 16 hex digits in the JSON
      *block_checksums += BlockCount(c.length, c.block_size);
      offset += c.length;
      StoredTensor& st = md.tensors[t.key];
      st.key = t.key;
      st.dtype = t.dtype;
      st.global_shape = t.global_shape;
      st.chunks.push_back(std::move(c));
    }
  }
  for (const ObjectParam& o : state.objects) {
    if (!IsMainReplica(o.object.replica_id)) continue;
    StoredObject so;
    so.key = o.object.key;
    so.unique_key = o.object.UniqueKey();
    so.global_shape = o.object.global_shape;
    so.global_offset = o.object.global_offset;
    so.file = file;
    so.offset = offset;
    so.length = 64;
    so.writer_rank = rank;
    offset += so.length;
    md.objects[so.unique_key] = std::move(so);
  }
  return md;
}

int Main(int argc, char** argv) {
  int world = 0;
  std::string optimizer = "dp_reshardable", load_topology, json_out;
  bool moe = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Fail(ErrorKind::kInvalidArgument, "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--world") {
      world = std::stoi(next());
    } else if (a == "--optimizer") {
      optimizer = next();
    } else if (a == "--moe") {
      moe = true;
    } else if (a == "--load-topology") {
      load_topology = next();
    } else if (a == "--json") {
      json_out = next();
    } else {
      Fail(ErrorKind::kInvalidArgument, "unknown argument {}", a);
    }
  }
  const int tp = 8, pp = 16, model_parallel = tp * pp;
  if (world <= 0 || world % model_parallel != 0) {
    Fail(ErrorKind::kInvalidArgument, "--world must be a positive multiple of {}", model_parallel);
  }
  const int dp = world / model_parallel;
  const std::string save_topology =
      fmt::format("tp={},pp={},dp={}{}", tp, pp, dp, moe ? ",ep=8" : "");
  if (load_topology.empty()) {
    // tp=16 is what one would try first, but Llama-3-405B's 8 query groups
    // cannot be split over 16 TP ranks (Megatron asserts the same): the
    // generator refuses it. tp=4,pp=8 changes both TP and PP.
    load_topology = fmt::format("tp=4,pp=8,dp={}{}", dp * 4, moe ? ",ep=8" : "");
  }
  const Scenario scenario = Scenario::FromJson(ScenarioJson(optimizer, moe), "scale");
  const Topology saved = Topology::Parse(save_topology);
  nlohmann::json out = {{"world", world},
                        {"model", moe ? "llama405b-moe" : "llama405b"},
                        {"optimizer", optimizer},
                        {"save_topology", save_topology},
                        {"load_topology", load_topology}};

  // expand (each rank's own work in a real job)
  auto t = std::chrono::steady_clock::now();
  GlobalMetadata global(world);
  CheckpointMetadata merged;
  uint64_t shards = 0, block_checksums = 0;
  std::vector<CheckpointMetadata> written(world);
  double commit_seconds = 0;
  for (int r = 0; r < world; ++r) {
    RankState state = ExpandRank(scenario, saved, r);
    LocalMetadata& local = global[r];
    for (const Param& p : state.params) {
      for (const ShardedTensor& piece : p.pieces) local.push_back(piece.WithoutData());
    }
    for (const ObjectParam& o : state.objects) {
      local.push_back(o.object.WithoutData());
    }
    shards += local.size();
    written[r] = WrittenBy(state, r, &block_checksums);
  }
  out["expand_s"] = Since(t);
  std::cerr << "expanded " << shards << " shards\n";
  out["shards"] = shards;
  out["peak_rss_mb_after_expand"] = PeakRssMb();

  // validate
  t = std::chrono::steady_clock::now();
  ValidateShardingIntegrity(global);
  out["validate_s"] = Since(t);
  std::cerr << "validated\n";
  global = GlobalMetadata();
  out["peak_rss_mb_after_validate"] = PeakRssMb();

  // commit
  t = std::chrono::steady_clock::now();
  merged.format = "native";
  merged.format_version = kNativeFormatVersion;
  merged.topology = save_topology;
  for (CheckpointMetadata& md : written) merged.MergeFrom(md);
  written = std::vector<CheckpointMetadata>();
  const std::string text = MetadataToJson(merged).dump();
  commit_seconds = Since(t);
  uint64_t chunks = 0;
  for (const auto& [key, st] : merged.tensors) chunks += st.chunks.size();
  out["commit_s"] = commit_seconds;
  out["tensors"] = merged.tensors.size();
  out["chunks"] = chunks;
  out["objects"] = merged.objects.size();
  out["metadata_bytes"] = text.size();
  out["metadata_bytes_per_chunk"] =
      static_cast<double>(text.size()) / static_cast<double>(chunks + merged.objects.size());
  out["block_checksums"] = block_checksums;
  out["block_checksum_data_file_bytes"] = 8 * block_checksums;
  out["block_checksum_json_bytes_v2"] = 16 * block_checksums;
  out["peak_rss_mb_after_commit"] = PeakRssMb();

  // open
  t = std::chrono::steady_clock::now();
  CheckChunkTiling(merged, "simulated metadata.json");
  out["open_s"] = Since(t);
  std::cerr << "committed and opened\n";

  // plan (rank 0 under the load topology)
  const Topology load = Topology::Parse(load_topology);
  if (load.world_size() != world) {
    Fail(ErrorKind::kInvalidArgument, "--load-topology {} has {} ranks, not {}", load_topology,
         load.world_size(), world);
  }
  std::map<std::string, Shape> grids = StoredObjectGrids(merged);
  MetadataOnlyReader reader(merged);
  nlohmann::json plans = nlohmann::json::array();
  for (int rank : {0, world - 1}) {
    // The rank's request without destination buffers (a plan reads nothing):
    // each factory piece as its own leaf, as the factory's build yields them;
    // objects whose grid is unchanged.
    t = std::chrono::steady_clock::now();
    RankState state = ExpandRank(scenario, load, rank);
    Dict tensors, objects;
    for (const Param& p : state.params) {
      for (size_t i = 0; i < p.pieces.size(); ++i) {
        tensors[fmt::format("{}#{}", p.path, i)] = Node(p.pieces[i].WithoutData());
      }
    }
    for (const ObjectParam& o : state.objects) {
      auto it = grids.find(o.object.key);
      if (it != grids.end() && it->second != o.object.global_shape) continue;
      objects[o.path] = Node(o.object.WithoutData());
    }
    Node request(
        Dict{{"tensors", Node(std::move(tensors))}, {"objects", Node(std::move(objects))}});
    const double build = Since(t);
    t = std::chrono::steady_clock::now();
    const double cpu = CpuSeconds();
    LoadSummary summary;
    try {
      LoadPieces pieces = LoadPreprocess(request);
      PlanShardedState(reader, pieces.sharded(), &summary);
      plans.push_back({{"rank", rank},
                       {"request_s", build},
                       {"plan_s", Since(t)},
                       {"plan_cpu_s", CpuSeconds() - cpu},
                       {"bytes_needed", summary.bytes_needed}});
    } catch (const CheckpointError& e) {
      // e.g. dp_reshardable under another TP/PP: refused as Megatron does.
      plans.push_back({{"rank", rank}, {"refused", e.what()}, {"plan_s", Since(t)}});
    }
  }
  out["plans"] = plans;
  out["peak_rss_mb"] = PeakRssMb();
  double load_average = -1;  // over the last minute: how shared the machine was
  std::ifstream("/proc/loadavg") >> load_average;
  out["load_average"] = load_average;

  const std::string dump = out.dump(2);
  if (json_out.empty()) {
    std::cout << dump << "\n";
  } else {
    std::ofstream(json_out) << dump << "\n";
    std::cerr << dump << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace distckpt

int main(int argc, char** argv) {
  try {
    return distckpt::Main(argc, argv);
  } catch (const distckpt::CheckpointError& e) {
    std::cerr << "scale: " << e.what() << "\n";
    return 2;
  }
}
