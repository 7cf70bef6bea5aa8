// Save modes against their own limits (paired timings, bench_util.h): the
// blocking part of an async save vs the staging copy alone (the same bytes
// memcpy'd into a warm staging buffer), and a fully parallel save of a
// replicated state vs one writer (time, and max / mean bytes per rank).
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "engine/save.h"
#include "engine/save_async.h"
#include "strategy/staging.h"

namespace distckpt::bench {
namespace {

std::vector<const Tensor*> Tensors(const Node& state) {
  std::vector<const Tensor*> tensors;
  for (const auto& [key, node] : state.as<Dict>())
    tensors.push_back(&node.as<ShardedTensor>().data);
  return tensors;
}

// SaveAsync until it returns (preparation, validation, staging, writer
// start) with a warm staging pool, paired with the copy it cannot avoid:
// every byte memcpy'd into a warm staging buffer (counter over_copy). The
// writers finish and the checkpoint is committed outside the timed part.
void BM_SaveAsyncBlocking(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("async");
  Node s = MakeState(bytes, count);
  std::vector<const Tensor*> tensors = Tensors(s);
  StagingPool pool;
  SaveOptions options;
  options.strategy.staging = &pool;
  int i = 0;
  auto save = [&] {
    std::string target = dir.Sub("ckpt" + std::to_string(i++));
    double blocking = 0;
    RunRanks(1, [&](Communicator& comm) {
      AsyncCallsQueue queue(comm);
      auto start = Clock::now();
      AsyncSave async = SaveAsync(s, target, comm, options);
      blocking = SecondsSince(start);
      queue.Schedule(async.request);
      queue.MaybeFinalize(true);
    });
    std::filesystem::remove_all(target);
    return blocking;
  };
  StagingPool copies;
  auto copy = [&] {
    auto start = Clock::now();
    std::shared_ptr<StagingBuffer> staged = copies.Acquire(bytes * count);
    size_t offset = 0;
    for (const Tensor* t : tensors) {
      std::memcpy(staged->data() + offset, t->data(), t->nbytes());
      offset += t->nbytes();
    }
    benchmark::ClobberMemory();
    return SecondsSince(start);
  };
  save();  // fills the pools (first touch of their pages)
  copy();
  RunPaired(state, "over_copy", save, copy);
  state.SetBytesProcessed(state.iterations() * bytes * count);
}

// 4 data-parallel ranks hold the same state (replica id = rank): 32 f32
// tensors of 256 KiB to 1.75 MiB (30.5 MiB). Fully parallel save (each
// shard written by one rank) paired with the plain save (rank 0, the main
// replica, writes everything): counter over_single_writer. Counter
// max_over_mean: the largest rank's bytes written over the mean, fully
// parallel.
void BM_ParallelSave(benchmark::State& state) {
  constexpr int kRanks = 4;
  Dict base;
  int64_t total = 0;
  for (int i = 0; i < 32; ++i) {
    const int64_t bytes = (1 + i % 7) * (256 << 10);
    std::string key = "t" + std::to_string(i);
    base[key] = Node(RampTensor(key, bytes, static_cast<float>(i)));
    total += bytes;
  }
  std::vector<Node> states;
  for (int r = 0; r < kRanks; ++r) {
    Dict d = base;
    for (auto& [key, node] : d) node.as<ShardedTensor>().replica_id = {r};
    states.emplace_back(std::move(d));
  }
  ScratchDir dir("parallel");
  std::vector<uint64_t> written(kRanks);
  int i = 0;
  auto save = [&](bool fully_parallel) {
    SaveOptions options;
    if (fully_parallel) options.strategy = SaveStrategy::FullyParallel();
    std::string target = dir.Sub("ckpt" + std::to_string(i++));
    auto start = Clock::now();
    RunRanks(kRanks, [&](Communicator& comm) {
      uint64_t bytes = Save(states[comm.rank()], target, comm, options).bytes_written;
      if (fully_parallel) written[comm.rank()] = bytes;
    });
    double seconds = SecondsSince(start);
    std::filesystem::remove_all(target);
    return seconds;
  };
  RunPaired(
      state, "over_single_writer", [&] { return save(true); }, [&] { return save(false); });
  uint64_t max = 0, sum = 0;
  for (uint64_t w : written) max = std::max(max, w), sum += w;
  state.SetBytesProcessed(state.iterations() * total);
  state.counters["max_over_mean"] = sum ? double(max) * kRanks / double(sum) : 0;
  state.counters["bytes_written"] = double(sum);
}

void AsyncSizes(benchmark::internal::Benchmark* b) {
  b->Args({64 << 10, 256})->Args({1 << 20, 64})->Args({16 << 20, 16})->Args({64 << 20, 4});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
}

BENCHMARK(BM_SaveAsyncBlocking)->Apply(AsyncSizes);
BENCHMARK(BM_ParallelSave)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace distckpt::bench
