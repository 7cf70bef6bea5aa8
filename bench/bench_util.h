// Helpers shared by the benchmark files: scratch directories, page-cache
// eviction for cold reads, and the raw-I/O baselines every distckpt figure is
// compared with (the same bytes written to one file with write + fsync, or
// read back with pread), and the states the benchmarks save and load.
//
// Thread-safety: functions are reentrant; ScratchDir is owned by one thread.
#ifndef DISTCKPT_BENCH_BENCH_UTIL_H_
#define DISTCKPT_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mapping/state_dict.h"

namespace distckpt::bench {

// A directory under $DISTCKPT_BENCH_DIR (default: the system temp dir),
// removed on destruction. Benchmarks write their checkpoints here.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Drops every file under `path` (a file or a directory tree) from the page
// cache with posix_fadvise(DONTNEED); files must be clean (fsync'd).
void EvictFromPageCache(const std::string& path);
// The fraction of the pages of the files under `path` that are in the page
// cache (mincore of a mapping of each file): about 0 after an eviction on a
// disk, 1 on a memory file system (tmpfs), where a "cold" read is a warm one.
double ResidentFraction(const std::string& path);
// Evicts `path` and checks that it left the cache; false where it did not
// (a cold benchmark then skips itself rather than time warm reads as cold).
bool EvictAndCheck(const std::string& path);

// The raw baselines: the fastest plain I/O of the same bytes, in large calls
// (pwritev / preadv of up to 64 MiB and IOV_MAX buffers per call, whatever
// the tensor size); the read with one thread per hardware thread, as a load
// reads.
// Writes `buffers` back to back to `path`, then fdatasyncs it.
void RawWriteFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers);
// The same through O_DIRECT (copied into a 64 MiB aligned buffer, 64 MiB
// writes); false where the file system refuses O_DIRECT (tmpfs).
bool RawWriteDirectFsync(const std::string& path,
                         const std::vector<std::vector<std::byte>>& buffers);
// Reads the file back into `buffers` (sizes must match the file) with
// `readers` threads (distckpt's helper pool: no thread start), in one of two
// patterns: kPiecesInTurn, 8 MiB pieces taken in turn (as a load's readers
// take chunks), or kContiguous, the file cut into `readers` contiguous
// ranges, each read in 64 MiB calls (the fastest way to read an evicted file
// on some disks). readers <= 0: one per hardware thread.
enum class RawReadPattern { kPiecesInTurn, kContiguous };
void RawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers, int readers = 0,
             RawReadPattern pattern = RawReadPattern::kPiecesInTurn);
void RawRead(const std::string& path, const std::vector<std::span<std::byte>>& buffers,
             int readers = 0, RawReadPattern pattern = RawReadPattern::kPiecesInTurn);
// The physical limit of a load's read: the fastest of both patterns with
// `readers` threads (the load's own parallelism), each timed alone (evicted
// before, when `cold`); seconds of the faster one.
double BestRawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers,
                   int readers, bool cold);

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start);

// The fewest seconds of `rounds` calls of `fn` (each returning its seconds),
// one after the other. A warm ratio times both of its sides this way:
// BestRawRead's two patterns run back to back, the second finding in the
// CPU's caches what the first just read, so a load timed once after them
// (its bytes evicted from the caches by the raw reads) was compared with a
// raw read that had the caches' help.
template <typename Fn>
double Best(int rounds, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) best = std::min(best, fn());
  return best;
}

// A whole 1-D f32 tensor `key` of `bytes` bytes on one rank, filled with the
// ramp first, first + 1, ... (`with_data` false: metadata only).
ShardedTensor RampTensor(const std::string& key, int64_t bytes, float first, bool with_data = true);
// `count` RampTensors "t0".."t<count-1>" of `bytes` bytes each (ramp from i).
Node MakeState(int64_t bytes, int64_t count, bool with_data = true);
// Rank `rank`'s block of a [rows, cols] f32 tensor "w" split 4 ways into row
// blocks, or column blocks when `by_columns`; data zeros (saved, or a
// destination).
ShardedTensor QuarterBlock(int64_t rows, int64_t cols, int rank, bool by_columns);
// `state` with every ShardedTensor's data replaced by a fresh destination
// buffer of `dtype` (nullopt: the tensor's own dtype), as a load request.
Node RequestFor(const Node& state, std::optional<DType> dtype = std::nullopt);
// `count` buffers of `bytes` bytes, filled (pages touched).
std::vector<std::vector<std::byte>> RawBuffers(int64_t bytes, int64_t count);
// Save() of `state` by a world of one rank.
void SaveOnOneRank(const Node& state, const std::string& dir);

// Paired timing, for a shared, noisy machine: every iteration runs `ours`
// and `reference` back to back, in alternating order; each returns the
// seconds it measured (setup such as page eviction left out). The iteration
// time is ours; counter `name` is the median over iterations of
// ours / reference, so a burst of load from other processes slows both
// sides of one ratio instead of one side of a ratio of separate runs.
void RunPaired(benchmark::State& state, const std::string& name,
               const std::function<double()>& ours, const std::function<double()>& reference);

// Where a warm verified load's time goes, with the load's parallelism, one
// rank: each iteration times, in turn (the order rotated every iteration),
//   raw_touched   the raw read of `raw` into `buffers` (already touched);
//   unverified    Load(touched, dir) with VerifyPolicy::kNever;
//   verified      the verified Load(touched, dir);
// then as many rounds, after those (allocating and freeing fresh memory
// slows the reads that follow: measured apart, so that it does not slow
// the parts above or their denominator), of
//   raw_touched_mixed  raw_touched again, among these;
//   raw_fresh     the same read into fresh, untouched memory (page faults);
//   fresh         the verified Load(fresh, dir) (no data: Load allocates).
// The iteration time is verified's; counters: each one's median over
// raw_touched's (faults = raw_fresh - raw_touched, verification = verified
// - unverified, the rest of the software = unverified - raw_touched), and
// raw_touched_ms.
void WarmLoadBreakdown(benchmark::State& state, const std::string& dir, const Node& touched,
                       const Node& fresh, const std::string& raw,
                       std::vector<std::vector<std::byte>>& buffers);

// A planted regression, to show that the gate catches one
// (bench/README.md): DISTCKPT_BENCH_PLANT names a side ("load" or "save");
// the benchmarks of that side run distckpt's operation this many times per
// timed iteration (2: twice the reads or writes), else once.
int PlantedRepeats(const std::string& side);

// Bytes in a human unit: "64KiB", "256MiB".
std::string SizeName(uint64_t bytes);

}  // namespace distckpt::bench

#endif  // DISTCKPT_BENCH_BENCH_UTIL_H_
