// The DCP format (PyTorch's torch.save-zip items, reference/format/dcp/)
// against the native format on the same state, paired (bench_util.h): save,
// warm load, and a resharded load, which also reports the bytes it read
// against the bytes it needed.
#include <benchmark/benchmark.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <vector>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/dcp/dcp_format.h"
#include "format/dcp/item_index.h"

namespace distckpt::bench {
namespace {

void SaveAs(const Format& format, const Node& state, const std::string& dir) {
  SaveOptions options;
  options.format = &format;
  RunRanks(1, [&](Communicator& comm) { Save(state, dir, comm, options); });
}

// DCP Save() paired with the native Save() of the same state (counter
// over_native); bytes_over_native compares the files' sizes.
void BM_DcpSave(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("dcp-save");
  Node s = MakeState(bytes, count);
  int i = 0;
  double written[2] = {0, 0};
  auto save = [&](const Format& format, int side) {
    const std::string target = dir.Sub("ckpt" + std::to_string(i++));
    auto start = Clock::now();
    SaveAs(format, s, target);
    const double seconds = SecondsSince(start);
    written[side] = 0;
    for (const auto& f : std::filesystem::directory_iterator(target)) {
      written[side] += static_cast<double>(f.file_size());
    }
    std::filesystem::remove_all(target);
    return seconds;
  };
  RunPaired(
      state, "over_native", [&] { return save(DcpFormat(), 0); },
      [&] { return save(NativeFormat(), 1); });
  state.SetBytesProcessed(state.iterations() * bytes * count);
  state.counters["bytes_over_native"] = written[0] / written[1];
}

// A warm DCP Load() of the whole state paired with the warm native Load()
// (counter over_native); read_over_needed: the DCP load's bytes read over
// its bytes needed (the zip headers each item costs).
void BM_DcpLoadWarm(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("dcp-load");
  const Node s = MakeState(bytes, count);
  SaveAs(DcpFormat(), s, dir.Sub("dcp"));
  SaveAs(NativeFormat(), s, dir.Sub("native"));
  const Node request = RequestFor(MakeState(bytes, count, false));
  LoadSummary summary;
  auto load = [&](const std::string& ckpt) {
    auto start = Clock::now();
    RunRanks(1, [&](Communicator& comm) { summary = Load(request, ckpt, comm).summary; });
    return SecondsSince(start);
  };
  load(dir.Sub("dcp"));  // warm both
  load(dir.Sub("native"));
  RunPaired(
      state, "over_native", [&] { return load(dir.Sub("dcp")); },
      [&] { return load(dir.Sub("native")); });
  load(dir.Sub("dcp"));
  state.SetBytesProcessed(state.iterations() * bytes * count);
  state.counters["read_over_needed"] =
      static_cast<double>(summary.bytes_read) / static_cast<double>(summary.bytes_needed);
}

// `count` [rows, 4096] f32 tensors of `bytes` bytes ("t0", ...), as rank
// `rank` of 4 holds them: row blocks (saved) or column blocks (requested).
// A row is 16 KiB, so a column block reads 4 KiB runs from each saved row.
Node QuarterBlocks(int64_t bytes, int64_t count, int rank, bool by_columns) {
  constexpr int64_t kCols = 4096;
  const int64_t rows = bytes / 4 / kCols;
  Dict d;
  for (int64_t i = 0; i < count; ++i) {
    const std::string key = "t" + std::to_string(i);
    ShardedTensor t = QuarterBlock(rows, kCols, rank, by_columns);
    t.key = key;
    if (!by_columns) {  // saved values: a ramp
      float* p = t.data.data_as<float>();
      for (int64_t j = 0; j < t.data.numel(); ++j) p[j] = static_cast<float>(i + j);
    }
    d[key] = Node(std::move(t));
  }
  return Node(std::move(d));
}

// A copy of DCP checkpoint `from` without distckpt's item indexes, as torch
// (or an older distckpt) writes it: every data file cut where its items end.
void CopyWithoutItemIndex(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to);
  for (const auto& f : std::filesystem::directory_iterator(to)) {
    if (f.path().extension() != ".distcp") continue;
    std::ifstream in(f.path(), std::ios::binary);
    std::vector<std::byte> last(kDcpIndexTrailerBytes);
    in.seekg(-static_cast<std::streamoff>(last.size()), std::ios::end);
    in.read(reinterpret_cast<char*>(last.data()), static_cast<std::streamsize>(last.size()));
    if (auto trailer = ParseDcpIndexTrailer(last, f.file_size(), f.path())) {
      std::filesystem::resize_file(f.path(), trailer->items_end);
    }
  }
}

// `count` tensors of `bytes` bytes saved by 4 ranks as row blocks, loaded
// warm by 4 ranks as column blocks. The DCP load is paired with the native
// one (counter over_native). Bytes read by the DCP load over the bytes its
// requests overlap: read_over_needed (default verification: the touched
// blocks of the item index's block CRC32s), unverified_read_over_needed
// (VerifyPolicy::kNever); and for the same files without their item index
// (as torch writes them: one CRC32 per record, so a partly needed record is
// read whole to check it) zip_read_over_needed, zip_read_over_touched (over
// the whole stored chunks the reads touched: what that rule implies) and
// zip_unverified_read_over_needed.
void BM_DcpReshard(benchmark::State& state) {
  const int64_t bytes = state.range(0), count = state.range(1);
  ScratchDir dir("dcp-reshard");
  for (const auto& [name, format] :
       {std::pair<const char*, const Format*>{"dcp", &DcpFormat()}, {"native", &NativeFormat()}}) {
    SaveOptions options;
    options.format = format;
    RunRanks(4, [&](Communicator& comm) {
      Save(QuarterBlocks(bytes, count, comm.rank(), false), dir.Sub(name), comm, options);
    });
  }
  std::vector<Node> requests;
  for (int r = 0; r < 4; ++r) requests.push_back(QuarterBlocks(bytes, count, r, true));
  struct Totals {
    uint64_t read = 0, needed = 0, touched = 0;
  };
  auto load = [&](const std::string& ckpt, VerifyPolicy verify, Totals* totals) {
    LoadOptions options;
    options.verify = verify;
    std::atomic<uint64_t> read{0}, needed{0}, touched{0};
    auto start = Clock::now();
    RunRanks(4, [&](Communicator& comm) {
      LoadResult result = Load(requests[comm.rank()], ckpt, comm, options);
      read += result.summary.bytes_read;
      needed += result.summary.bytes_needed;
      touched += result.summary.chunk_bytes;
    });
    const double seconds = SecondsSince(start);
    if (totals) *totals = {read, needed, touched};
    return seconds;
  };
  CopyWithoutItemIndex(dir.Sub("dcp"), dir.Sub("zip"));
  Totals verified, unverified, zip, zip_unverified;
  load(dir.Sub("native"), VerifyPolicy::kWhenWhole, nullptr);  // warm both
  load(dir.Sub("dcp"), VerifyPolicy::kNever, &unverified);
  load(dir.Sub("zip"), VerifyPolicy::kWhenWhole, &zip);
  load(dir.Sub("zip"), VerifyPolicy::kNever, &zip_unverified);
  RunPaired(
      state, "over_native",
      [&] { return load(dir.Sub("dcp"), VerifyPolicy::kWhenWhole, &verified); },
      [&] { return load(dir.Sub("native"), VerifyPolicy::kWhenWhole, nullptr); });
  state.SetBytesProcessed(state.iterations() * bytes * count);
  auto ratio = [](uint64_t a, uint64_t b) { return b ? double(a) / double(b) : 0.0; };
  state.counters["read_over_needed"] = ratio(verified.read, verified.needed);
  state.counters["unverified_read_over_needed"] = ratio(unverified.read, unverified.needed);
  state.counters["zip_read_over_needed"] = ratio(zip.read, zip.needed);
  state.counters["zip_read_over_touched"] = ratio(zip.read, zip.touched);
  state.counters["zip_unverified_read_over_needed"] =
      ratio(zip_unverified.read, zip_unverified.needed);
}

// (tensor bytes, tensor count) as checkpoint_bench's IO_SIZES: 256 MiB states.
void DcpSizes(benchmark::internal::Benchmark* b) {
  b->Args({64 << 10, 256})->Args({1 << 20, 64})->Args({16 << 20, 16})->Args({64 << 20, 4});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
}

BENCHMARK(BM_DcpSave)->Apply(DcpSizes);
BENCHMARK(BM_DcpLoadWarm)->Apply(DcpSizes);
BENCHMARK(BM_DcpReshard)
    ->Args({64 << 10, 256})
    ->Args({1 << 20, 64})
    ->Args({64 << 20, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
}  // namespace distckpt::bench
