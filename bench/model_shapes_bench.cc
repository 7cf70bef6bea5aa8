// Real-run-shaped states (bench/peer/model_shapes.py): the tensors of a
// Megatron training run's checkpoint, as the fixtures of
// fixtures/megatron-runs hold them (model in bf16, fp32 optimizer state),
// scaled up, saved and loaded by one rank as whole tensors, each operation
// paired with the raw I/O of the same bytes (counter over_raw, as BM_Save and
// BM_LoadWarm / BM_LoadCold). Registered only when DISTCKPT_BENCH_SHAPES
// names shape files (':'-separated; a line per tensor: "key<TAB>dtype d0 d1
// ..." (keys may hold spaces), dtype as ParseDType reads it); the benchmark's name is the file's
// stem: BM_ModelSave/<stem>, BM_ModelLoadWarm/<stem>, BM_ModelLoadCold/<stem>, and
// BM_ModelLoadBreakdown/<stem> (where the warm load's time goes: WarmLoadBreakdown).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "engine/load.h"
#include "engine/save.h"

namespace distckpt::bench {
namespace {

struct ModelShapes {
  std::string name;
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> tensors;
  int64_t bytes = 0;
};

ModelShapes ReadShapes(const std::string& path) {
  ModelShapes m;
  m.name = std::filesystem::path(path).stem().string();
  std::ifstream in(path);
  if (!in) Fail(ErrorKind::kIo, "DISTCKPT_BENCH_SHAPES: cannot open {}", path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) {
      Fail(ErrorKind::kInvalidArgument, "{}:{}: expected \"key<TAB>dtype d0 d1 ...\"", path, n);
    }
    const std::string key = line.substr(0, tab);
    std::istringstream fields(line.substr(tab + 1));
    std::string dtype;
    if (!(fields >> dtype)) Fail(ErrorKind::kInvalidArgument, "{}:{}: no dtype", path, n);
    Shape shape;
    for (int64_t d; fields >> d;) {
      if (d < 0) Fail(ErrorKind::kInvalidArgument, "{}:{}: negative dimension", path, n);
      shape.push_back(d);
    }
    if (!fields.eof()) Fail(ErrorKind::kInvalidArgument, "{}:{}: bad dimension", path, n);
    const std::optional<DType> parsed = ParseDType(dtype);
    if (!parsed) Fail(ErrorKind::kInvalidArgument, "{}:{}: unknown dtype '{}'", path, n, dtype);
    const DType type = *parsed;
    m.bytes += Volume(shape) * static_cast<int64_t>(DTypeSize(type));
    m.tensors.push_back({key, {type, shape}});
  }
  return m;
}

// The state (whole tensors on one rank; data: a byte pattern) or a request
// for it (zeroed destinations).
Node ModelState(const ModelShapes& m) {
  Dict tensors;
  uint8_t fill = 1;
  for (const auto& [key, spec] : m.tensors) {
    ShardedTensor t;
    t.key = key;
    t.dtype = spec.first;
    t.local_shape = t.global_shape = spec.second;
    t.global_offset = Shape(spec.second.size(), 0);
    t.axis_fragmentations = Shape(spec.second.size(), 1);
    t.data = Tensor::Empty(t.dtype, t.local_shape);
    std::memset(t.data.data(), fill++, t.data.nbytes());
    tensors[key] = Node(std::move(t));
  }
  return Node(std::move(tensors));
}

// The raw buffers of the same bytes: one per tensor (empty ones skipped).
std::vector<std::vector<std::byte>> ModelBuffers(const ModelShapes& m) {
  std::vector<std::vector<std::byte>> buffers;
  for (const auto& [key, spec] : m.tensors) {
    const int64_t bytes = Volume(spec.second) * static_cast<int64_t>(DTypeSize(spec.first));
    if (bytes > 0) buffers.emplace_back(bytes, std::byte{1});
  }
  return buffers;
}

void ModelSave(benchmark::State& state, const ModelShapes& m) {
  ScratchDir dir("model-save");
  const Node s = ModelState(m);
  auto buffers = ModelBuffers(m);
  int i = 0;
  RunRanks(1, [&](Communicator& comm) {
    RunPaired(
        state, "over_raw",
        [&] {
          const std::string target = dir.Sub("ckpt" + std::to_string(i++));
          auto start = Clock::now();
          Save(s, target, comm);
          const double seconds = SecondsSince(start);
          std::filesystem::remove_all(target);
          return seconds;
        },
        [&] {
          auto start = Clock::now();
          RawWriteFsync(dir.Sub("raw.bin"), buffers);
          const double seconds = SecondsSince(start);
          std::filesystem::remove(dir.Sub("raw.bin"));
          return seconds;
        });
  });
  state.SetBytesProcessed(state.iterations() * m.bytes);
}

void ModelLoad(benchmark::State& state, const ModelShapes& m, bool cold) {
  ScratchDir dir("model-load");
  SaveOnOneRank(ModelState(m), dir.Sub("ckpt"));
  Node request = ModelState(m);
  for (auto& [key, node] : request.as<Dict>()) {
    ShardedTensor& t = node.as<ShardedTensor>();
    t.data = Tensor::Zeros(t.dtype, t.local_shape);
  }
  auto buffers = ModelBuffers(m);
  RawWriteFsync(dir.Sub("raw.bin"), buffers);
  if (cold && (!EvictAndCheck(dir.Sub("ckpt")) || !EvictAndCheck(dir.Sub("raw.bin")))) {
    state.SkipWithError("cold skipped: posix_fadvise(DONTNEED) leaves the files cached here");
    return;
  }
  RunRanks(1, [&](Communicator& comm) {
    Load(request, dir.Sub("ckpt"), comm);  // warm
    RawRead(dir.Sub("raw.bin"), buffers);
    const int readers = ThreadsPerRank(comm);
    RunPaired(
        state, "over_raw",
        [&] {
          return Best(cold ? 1 : 2, [&] {  // warm: as the raw side is timed
            if (cold) EvictFromPageCache(dir.Sub("ckpt"));
            auto start = Clock::now();
            Load(request, dir.Sub("ckpt"), comm);
            return SecondsSince(start);
          });
        },
        [&] { return BestRawRead(dir.Sub("raw.bin"), buffers, readers, cold); });
  });
  state.SetBytesProcessed(state.iterations() * m.bytes);
}

// Where the warm load's time goes on these shapes (WarmLoadBreakdown).
void ModelLoadBreakdown(benchmark::State& state, const ModelShapes& m) {
  ScratchDir dir("model-breakdown");
  SaveOnOneRank(ModelState(m), dir.Sub("ckpt"));
  Node touched = ModelState(m), fresh = ModelState(m);
  for (auto& [key, node] : touched.as<Dict>()) {
    ShardedTensor& t = node.as<ShardedTensor>();
    t.data = Tensor::Zeros(t.dtype, t.local_shape);
  }
  for (auto& [key, node] : fresh.as<Dict>()) node.as<ShardedTensor>().data = Tensor();
  auto buffers = ModelBuffers(m);
  RawWriteFsync(dir.Sub("raw.bin"), buffers);
  WarmLoadBreakdown(state, dir.Sub("ckpt"), touched, fresh, dir.Sub("raw.bin"), buffers);
  state.SetBytesProcessed(state.iterations() * m.bytes);
}

// Registers the benchmarks of every file in DISTCKPT_BENCH_SHAPES.
const bool registered = [] {
  const char* list = std::getenv("DISTCKPT_BENCH_SHAPES");
  if (!list) return false;
  std::istringstream files(list);
  for (std::string path; std::getline(files, path, ':');) {
    if (path.empty()) continue;
    std::shared_ptr<const ModelShapes> m;
    try {
      m = std::make_shared<const ModelShapes>(ReadShapes(path));
    } catch (const CheckpointError& e) {  // before main: no crash, a message and exit 2
      std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
      std::exit(2);
    }
    auto each = [](benchmark::internal::Benchmark* b) {
      b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
    };
    each(benchmark::RegisterBenchmark(("BM_ModelSave/" + m->name).c_str(),
                                      [m](benchmark::State& s) { ModelSave(s, *m); }));
    each(benchmark::RegisterBenchmark(("BM_ModelLoadWarm/" + m->name).c_str(),
                                      [m](benchmark::State& s) { ModelLoad(s, *m, false); }));
    each(benchmark::RegisterBenchmark(("BM_ModelLoadCold/" + m->name).c_str(),
                                      [m](benchmark::State& s) { ModelLoad(s, *m, true); }));
    each(benchmark::RegisterBenchmark(("BM_ModelLoadBreakdown/" + m->name).c_str(),
                                      [m](benchmark::State& s) { ModelLoadBreakdown(s, *m); }));
  }
  return true;
}();

}  // namespace
}  // namespace distckpt::bench
