// distckpt's benchmark suite (Google Benchmark). Every distckpt figure has a
// baseline in the same run: save vs raw write+fsync of the same bytes, load
// vs raw pread of them (cold: pages evicted with posix_fadvise; warm),
// resharded load vs same-layout load, checksum vs memcpy. bench/compare turns
// the JSON output into ratios and gates them against bench/baseline.json.
//
// Sizes: BM_*/<tensor bytes>/<tensor count>. Set DISTCKPT_BENCH_LARGE=1 for
// the 2 GiB states.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "core/helper_pool.h"
#include "engine/chunk_index.h"
#include "engine/load.h"
#include "engine/load_plan.h"
#include "engine/save.h"
#include "io/checksum.h"
#include "mapping/validation.h"

namespace distckpt::bench {
namespace {

constexpr const char* kNoEviction =
    "cold skipped: posix_fadvise(DONTNEED) leaves the files cached here (a memory file system?); "
    "set DISTCKPT_BENCH_DIR to a disk";

// One saved checkpoint per (bytes, count), shared by the load benchmarks.
const std::string& SavedCheckpoint(int64_t bytes, int64_t count) {
  static std::map<std::pair<int64_t, int64_t>, std::unique_ptr<ScratchDir>> saved;
  auto& dir = saved[{bytes, count}];
  if (!dir) {
    dir = std::make_unique<ScratchDir>("load");
    SaveOnOneRank(MakeState(bytes, count), dir->Sub("ckpt"));
  }
  static std::string path;
  path = dir->Sub("ckpt");
  return path;
}

// The raw write alone; `direct`: through O_DIRECT (the disk run records
// whether it beats the buffered write that the ratios use; skipped on tmpfs).
void RawWriteBench(benchmark::State& state, bool direct) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("raw-write");
  auto buffers = RawBuffers(bytes, count);
  for (auto _ : state) {
    auto start = Clock::now();
    if (!direct) {
      RawWriteFsync(dir.Sub("raw.bin"), buffers);
    } else if (!RawWriteDirectFsync(dir.Sub("raw.bin"), buffers)) {
      state.SkipWithError("O_DIRECT not supported here");
      break;
    }
    state.SetIterationTime(SecondsSince(start));
  }
  state.SetBytesProcessed(state.iterations() * bytes * count);
}
void BM_RawWrite(benchmark::State& state) { RawWriteBench(state, false); }
void BM_RawWriteDirect(benchmark::State& state) { RawWriteBench(state, true); }

// Paired with the raw write of the same bytes (counter over_raw).
void BM_Save(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("save");
  Node s = MakeState(bytes, count);
  auto buffers = RawBuffers(bytes, count);
  int i = 0;
  // One rank thread for the whole run: a training rank calls Save from a
  // thread it already has, and the raw write starts none either.
  RunRanks(1, [&](Communicator& comm) {
    RunPaired(
        state, "over_raw",
        [&] {
          double seconds = 0;
          for (int r = 0; r < PlantedRepeats("save"); ++r) {
            std::string target = dir.Sub("ckpt" + std::to_string(i++));
            auto start = Clock::now();
            Save(s, target, comm);
            seconds += SecondsSince(start);
            std::filesystem::remove_all(target);
          }
          return seconds;
        },
        [&] {
          auto start = Clock::now();
          RawWriteFsync(dir.Sub("raw.bin"), buffers);
          double seconds = SecondsSince(start);
          std::filesystem::remove(dir.Sub("raw.bin"));
          return seconds;
        });
  });
  state.SetBytesProcessed(state.iterations() * bytes * count);
}

// The raw read alone, with a load's parallelism (one reader per hardware
// thread), in the faster of the two patterns (bench_util.h). Cold: skipped
// where eviction leaves the file cached (tmpfs).
void RawReadBench(benchmark::State& state, bool cold) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("raw-read");
  auto buffers = RawBuffers(bytes, count);
  RawWriteFsync(dir.Sub("raw.bin"), buffers);
  RawRead(dir.Sub("raw.bin"), buffers);  // warm the cache once
  if (cold && !EvictAndCheck(dir.Sub("raw.bin"))) {
    state.SkipWithError(kNoEviction);
    return;
  }
  for (auto _ : state) {
    state.SetIterationTime(BestRawRead(dir.Sub("raw.bin"), buffers, HardwareThreads(), cold));
  }
  state.SetBytesProcessed(state.iterations() * bytes * count);
}
void BM_RawReadCold(benchmark::State& state) { RawReadBench(state, true); }
void BM_RawReadWarm(benchmark::State& state) { RawReadBench(state, false); }

// Paired with the raw read of the same bytes from one file with the load's
// parallelism (a rank alone on its machine reads with one thread per
// hardware thread: ThreadsPerRank), the faster of two patterns (counter
// over_raw). Cold: both sides evicted before each read, and the benchmark
// skipped (not timed warm) where eviction leaves the files cached (tmpfs).
// The request's destinations exist and are touched by the first (untimed)
// load, as a model's parameters are when Megatron's load fills them in place;
// `allocate`: the request has no destinations and every load allocates them
// (fresh memory: the kernel's page faults are timed).
void LoadBench(benchmark::State& state, bool cold, const LoadOptions& options = {},
               bool allocate = false) {
  const int64_t bytes = state.range(0), count = state.range(1);
  const std::string& dir = SavedCheckpoint(bytes, count);
  Node request =
      allocate ? MakeState(bytes, count, false) : RequestFor(MakeState(bytes, count, false));
  ScratchDir raw("raw-read");
  auto buffers = RawBuffers(bytes, count);
  RawWriteFsync(raw.Sub("raw.bin"), buffers);
  if (cold && (!EvictAndCheck(dir) || !EvictAndCheck(raw.Sub("raw.bin")))) {
    state.SkipWithError(kNoEviction);
    return;
  }
  uint64_t read = 0;
  const int repeats = PlantedRepeats("load");
  // One rank thread for the whole run, as in BM_Save.
  RunRanks(1, [&](Communicator& comm) {
    Load(request, dir, comm);  // warm
    RawRead(raw.Sub("raw.bin"), buffers);
    const int readers = ThreadsPerRank(comm);
    RunPaired(
        state, "over_raw",
        [&] {
          // Warm: the faster of two loads back to back, as the raw side is
          // timed (Best); cold: one, each evicted before it.
          return Best(cold ? 1 : 2, [&] {
            double seconds = 0;
            for (int i = 0; i < repeats; ++i) {
              if (cold) EvictFromPageCache(dir);
              auto start = Clock::now();
              read = Load(request, dir, comm, options).summary.bytes_read;
              seconds += SecondsSince(start);
            }
            return seconds;
          });
        },
        [&] { return BestRawRead(raw.Sub("raw.bin"), buffers, readers, cold); });
  });
  state.SetBytesProcessed(state.iterations() * bytes * count);
  state.counters["bytes_read"] = static_cast<double>(read);
}
void BM_LoadCold(benchmark::State& state) { LoadBench(state, true); }
void BM_LoadWarm(benchmark::State& state) { LoadBench(state, false); }
// The warm load without checksum verification (VerifyPolicy::kNever): what
// hashing every byte costs.
void BM_LoadWarmUnverified(benchmark::State& state) {
  LoadOptions options;
  options.verify = VerifyPolicy::kNever;
  LoadBench(state, false, options);
}
// The warm verified load into destinations it allocates (not gated): beside
// BM_LoadWarm (in place), against the same raw read into touched buffers.
void BM_LoadWarmAllocating(benchmark::State& state) { LoadBench(state, false, {}, true); }

// Where a warm verified load's time goes beyond a raw read into touched
// buffers (not gated; the figures in docs/performance.md): WarmLoadBreakdown
// (bench_util.h) of the state of `count` tensors of `bytes` bytes.
void BM_WarmLoadBreakdown(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  const std::string& dir = SavedCheckpoint(bytes, count);
  ScratchDir raw("raw-read");
  auto buffers = RawBuffers(bytes, count);
  RawWriteFsync(raw.Sub("raw.bin"), buffers);
  WarmLoadBreakdown(state, dir, RequestFor(MakeState(bytes, count, false)),
                    MakeState(bytes, count, false), raw.Sub("raw.bin"), buffers);
  state.SetBytesProcessed(state.iterations() * bytes * count);
}

// A [rows, cols] f32 tensor saved as 4 row blocks (4 ranks), loaded cold by
// 4 ranks as column blocks (resharded), paired with the same-layout load of
// row blocks (counter over_same_layout); read_over_needed from the resharded
// load's summaries.
void BM_Reshard(benchmark::State& state) {
  const int64_t rows = 1024, cols = state.range(0) / 4 / rows;
  ScratchDir dir("reshard");
  auto shard = [&](int rank, bool by_columns) {
    Dict d;
    d["w"] = Node(QuarterBlock(rows, cols, rank, by_columns));
    return Node(std::move(d));
  };
  const std::string ckpt = dir.Sub("ckpt");
  RunRanks(4, [&](Communicator& comm) { Save(shard(comm.rank(), false), ckpt, comm); });
  std::vector<Node> resharded, same;
  for (int r = 0; r < 4; ++r) {
    resharded.push_back(shard(r, true));
    same.push_back(shard(r, false));
  }
  uint64_t read = 0, needed = 0;
  auto load = [&](const std::vector<Node>& requests, bool count) {
    EvictFromPageCache(ckpt);
    std::atomic<uint64_t> r{0}, n{0};
    auto start = Clock::now();
    RunRanks(4, [&](Communicator& comm) {
      LoadResult result = Load(requests[comm.rank()], ckpt, comm);
      r += result.summary.bytes_read;
      n += result.summary.bytes_needed;
    });
    double seconds = SecondsSince(start);
    if (count) read = r, needed = n;
    return seconds;
  };
  RunPaired(
      state, "over_same_layout", [&] { return load(resharded, true); },
      [&] { return load(same, false); });
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
  state.counters["read_over_needed"] = needed ? double(read) / double(needed) : 0;
  // 1 where the loads were cold; 0 on a memory file system (both sides warm).
  state.counters["cold"] = EvictAndCheck(ckpt) ? 1 : 0;
}

// Load planning of one request over `range(0)` stored chunks (metadata only).
void BM_PlanChunks(benchmark::State& state) {
  const int64_t chunks = state.range(0);
  StoredTensor stored;
  stored.key = "w";
  stored.dtype = DType::kF32;
  stored.global_shape = {chunks * 8};
  for (int64_t i = 0; i < chunks; ++i) {
    StoredChunk c;
    c.box = Box{{i * 8}, {8}};
    c.length = 32;
    stored.chunks.push_back(c);
  }
  ShardedTensor request;
  request.key = "w";
  request.global_shape = request.local_shape = {chunks * 8};
  request.global_offset = {0};
  for (auto _ : state) benchmark::DoNotOptimize(PlanTensorLoad(stored, request));
  state.SetItemsProcessed(state.iterations() * chunks);
}

// A key stored as `chunks` chunks on a grid of (chunks / 256, 16, 16) cells,
// as a MoE expert weight is (layers, experts, TP parts); chunks in the order
// of the ranks that wrote them (TP part outermost), not in offset order.
StoredTensor GridKey(int64_t chunks) {
  StoredTensor stored;
  stored.key = "w";
  stored.dtype = DType::kBF16;
  const int64_t layers = chunks / 256;
  stored.global_shape = {layers, 16, 16 * 4, 1024};
  for (int64_t part = 0; part < 16; ++part) {
    for (int64_t layer = 0; layer < layers; ++layer) {
      for (int64_t expert = 0; expert < 16; ++expert) {
        StoredChunk c;
        c.box = Box{{layer, expert, part * 4, 0}, {1, 1, 4, 1024}};
        c.length = 4 * 1024 * 2;
        stored.chunks.push_back(c);
      }
    }
  }
  return stored;
}

// Building a ChunkIndex over `range(0)` grid chunks (GridKey).
void BM_IndexChunks(benchmark::State& state) {
  const StoredTensor stored = GridKey(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(ChunkIndex(stored));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// Planning a key's requests under another TP (two parts each, one per layer
// and expert: `range(0)` / 8 requests) over `range(0)` grid chunks, with a
// ChunkIndex built once (range(1) = 1) or scanning every chunk per request.
void BM_PlanPieces(benchmark::State& state) {
  const StoredTensor stored = GridKey(state.range(0));
  const int64_t layers = stored.global_shape[0];
  for (auto _ : state) {
    std::optional<ChunkIndex> index;
    if (state.range(1)) index.emplace(stored);
    for (int64_t layer = 0; layer < layers; ++layer) {
      for (int64_t expert = 0; expert < 16; ++expert) {
        for (int64_t half = 0; half < 2; ++half) {
          ShardedTensor request;
          request.key = "w";
          request.dtype = DType::kBF16;
          request.global_shape = stored.global_shape;
          request.global_offset = {layer, expert, half * 32, 0};
          request.local_shape = {1, 1, 32, 1024};
          benchmark::DoNotOptimize(PlanTensorLoad(stored, request, index ? &*index : nullptr));
        }
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// Sharding validation of `range(0)` chunks spread over `range(1)` simulated ranks.
void BM_ValidateChunks(benchmark::State& state) {
  const int64_t chunks = state.range(0), ranks = state.range(1);
  GlobalMetadata global(ranks);
  const int64_t keys = std::max<int64_t>(1, chunks / 1024);
  const int64_t per_key = chunks / keys;
  for (int64_t k = 0; k < keys; ++k) {
    for (int64_t i = 0; i < per_key; ++i) {
      ShardedTensor t;
      t.key = "k" + std::to_string(k);
      t.dtype = DType::kF32;
      t.global_shape = {per_key * 4};
      t.local_shape = {4};
      t.global_offset = {i * 4};
      t.axis_fragmentations = Shape{per_key};
      global[(k * per_key + i) % ranks].push_back(t);
    }
  }
  for (auto _ : state) ValidateShardingIntegrity(global);
  state.SetItemsProcessed(state.iterations() * keys * per_key);
}

void BM_Checksum(benchmark::State& state) {
  std::vector<std::byte> data(state.range(0), std::byte{7});
  for (auto _ : state) benchmark::DoNotOptimize(Checksum(data));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<std::byte> src(state.range(0), std::byte{7}), dst(state.range(0));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// (tensor bytes, tensor count): KiB to 256 MiB tensors, states up to 2 GiB.
// The 64 KiB state (16 MiB, a few milliseconds an operation) is timed over
// 25 pairs per repetition, not 5: its ratio is mostly fixed costs, which a
// scheduling hiccup on a busy machine doubles, and the median of 25 pairs
// holds where that of 5 does not (bench/README.md, "The gate").
void SmallIoSize(benchmark::internal::Benchmark* b) {
  b->Args({64 << 10, 256})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(25);
}
void LargerIoSizes(benchmark::internal::Benchmark* b) {
  b->Args({1 << 20, 64})->Args({16 << 20, 16})->Args({64 << 20, 4});
  if (std::getenv("DISTCKPT_BENCH_LARGE")) b->Args({256 << 20, 8});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
}
// Registers `fn` for every size: the 64 KiB state with SmallIoSize, the rest
// with LargerIoSizes (the two families share the benchmark's name).
#define IO_SIZES(fn)                 \
  BENCHMARK(fn)->Apply(SmallIoSize); \
  BENCHMARK(fn)->Apply(LargerIoSizes)

IO_SIZES(BM_RawWrite);
IO_SIZES(BM_RawWriteDirect);
IO_SIZES(BM_Save);
IO_SIZES(BM_RawReadCold);
IO_SIZES(BM_LoadCold);
IO_SIZES(BM_RawReadWarm);
IO_SIZES(BM_LoadWarm);
IO_SIZES(BM_LoadWarmUnverified);
BENCHMARK(BM_LoadWarmAllocating)->Apply(SmallIoSize);
BENCHMARK(BM_WarmLoadBreakdown)
    ->Args({64 << 10, 256})
    ->Args({64 << 20, 4})
    ->Args({256 << 20, 4})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(7);
BENCHMARK(BM_Reshard)->Arg(64 << 20)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_PlanChunks)->RangeMultiplier(10)->Range(10000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IndexChunks)->Arg(32768)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanPieces)->Args({32768, 1})->Args({32768, 0})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ValidateChunks)
    ->Args({10000, 64})
    ->Args({100000, 1024})
    ->Args({1000000, 1024})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_Checksum)->Arg(64 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy)->Arg(64 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace distckpt::bench

BENCHMARK_MAIN();
