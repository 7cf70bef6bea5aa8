// Memory a load needs beyond its destination buffers (target: at most one
// stored chunk). The destinations are allocated and touched before the
// measurement; the heap high-water mark (bench/heap_counter.h: every
// operator new of the process) is reset, Load runs, and the counter
// overhead_bytes is the peak minus the live bytes before the call. It is
// divided by the largest stored chunk (overhead_over_chunk). As a cross-check
// the resident set's high-water mark (VmHWM, reset through
// /proc/self/clear_refs) gives rss_overhead_over_chunk (-1 when the kernel
// refuses the reset).
//
// BM_LoadMemory/0: 4 x 64 MiB f32, same layout and dtype (verified chunks).
// BM_LoadMemory/1: the same, loaded as bf16 (dtype conversion).
// BM_LoadMemory/2: a [1024, 16384] f32 tensor saved as 4 row blocks by 4
//                  ranks, loaded as 4 column blocks (resharding).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/save.h"
#include "heap_counter.h"

namespace distckpt::bench {
namespace {

// VmHWM / VmRSS of this process in bytes (-1 when unreadable).
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

bool ResetRssPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

// One saved checkpoint per case; `ranks` saving ranks.
struct Case {
  std::unique_ptr<ScratchDir> dir;
  int ranks = 1;
  std::vector<Node> requests;  // one per loading rank
  int64_t largest_chunk = 0;
};

Case& Prepare(int which) {
  static std::map<int, Case> cases;
  Case& c = cases[which];
  if (c.dir) return c;
  c.dir = std::make_unique<ScratchDir>("load-memory");
  const std::string ckpt = c.dir->Sub("ckpt");
  if (which < 2) {
    SaveOnOneRank(MakeState(64 << 20, 4), ckpt);
    c.requests.push_back(RequestFor(MakeState(64 << 20, 4, false),
                                    which == 1 ? std::optional(DType::kBF16) : std::nullopt));
    c.largest_chunk = 64 << 20;
  } else {
    c.ranks = 4;
    RunRanks(4, [&](Communicator& comm) {
      Dict d;
      d["w"] = Node(QuarterBlock(1024, 16384, comm.rank(), false));
      Save(Node(std::move(d)), ckpt, comm);
    });
    for (int r = 0; r < 4; ++r) {
      Dict d;
      d["w"] = Node(QuarterBlock(1024, 16384, r, true));
      c.requests.emplace_back(std::move(d));
    }
    c.largest_chunk = 16 << 20;
  }
  return c;
}

void BM_LoadMemory(benchmark::State& state) {
  Case& c = Prepare(static_cast<int>(state.range(0)));
  const std::string ckpt = c.dir->Sub("ckpt");
  int64_t heap = 0, rss = 0;
  bool rss_ok = true;
  for (auto _ : state) {
    const int64_t live = HeapLiveBytes();
    ResetHeapPeak();
    rss_ok = rss_ok && ResetRssPeak();
    const int64_t rss_before = ProcStatusBytes("VmRSS");
    RunRanks(c.ranks, [&](Communicator& comm) { Load(c.requests[comm.rank()], ckpt, comm); });
    heap = std::max(heap, HeapPeakBytes() - live);
    rss = std::max(rss, ProcStatusBytes("VmHWM") - rss_before);
  }
  state.counters["overhead_bytes"] = double(heap);
  state.counters["overhead_over_chunk"] = double(heap) / double(c.largest_chunk);
  state.counters["rss_overhead_over_chunk"] = rss_ok ? double(rss) / double(c.largest_chunk) : -1;
}

BENCHMARK(BM_LoadMemory)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace distckpt::bench

BENCHMARK_MAIN();
