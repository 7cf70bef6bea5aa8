// Many processes against the disk's parallel limit: N Open MPI ranks save and
// load a state together, against N processes writing and reading the same
// bytes raw in the same run (each its own file, 64 MiB writes + fdatasync;
// pread after eviction for cold reads).
//
//   mpirun -np 8 build/bench/mpi_bandwidth [--mib-per-rank 256] [--rounds 3] [--dir D]
//
// Two layouts of the same unique bytes (N x MiB-per-rank in all):
//   plain          every rank holds its own row block of 4 tensors (no
//                  replicas): each rank writes and reads its block.
//   fully_parallel tp=N/2 x dp=2: every block is held by 2 ranks; the fully
//                  parallel save spreads the writing over each DP pair, the
//                  fully parallel load reads each block once per pair and
//                  exchanges it.
// Every round runs raw and distckpt back to back (alternating order); each
// time is from a barrier to the last rank's end. Rank 0 prints one JSON object
// per round and a summary with the medians of raw / distckpt time (1.0 = the
// raw aggregate bandwidth; the target is >= 0.9), and of a reference load of
// the same checkpoint: plain unverified (`--verify never`: the cost of
// hashing), fully parallel with the plain strategy (no exchange, every rank
// reads its whole block: twice the unique bytes).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/mpi_communicator.h"
#include "engine/load.h"
#include "engine/save.h"

namespace distckpt::bench {
namespace {

constexpr int kTensors = 4;
constexpr int64_t kCols = 4096;  // f32 columns: 16 KiB rows

struct Layout {
  std::string name;
  int tp = 0, dp = 1;
};

// Rank `rank`'s state: kTensors f32 tensors [tp * rows, kCols], its TP row
// block of each, replica id = its DP index.
Node BlockState(const Layout& l, int rank, int64_t rows, bool with_data) {
  Dict tensors;
  const int tp = rank % l.tp, dp = rank / l.tp;
  for (int i = 0; i < kTensors; ++i) {
    ShardedTensor t;
    t.key = fmt::format("w{}", i);
    t.dtype = DType::kF32;
    t.global_shape = {l.tp * rows, kCols};
    t.local_shape = {rows, kCols};
    t.global_offset = {tp * rows, 0};
    t.axis_fragmentations = Shape{l.tp, 1};
    t.replica_id = {0, 0, dp};
    t.data = Tensor::Empty(DType::kF32, t.local_shape);
    if (with_data) {
      float* p = t.data.data_as<float>();
      for (int64_t k = 0; k < rows * kCols; ++k) p[k] = static_cast<float>(k % 1000 + i + tp);
    }
    const std::string key = t.key;  // (the right side of = is evaluated first)
    tensors[key] = Node(std::move(t));
  }
  return Node(std::move(tensors));
}

double Timed(Communicator& comm, const std::function<void()>& op) {
  comm.Barrier();
  auto start = Clock::now();
  op();
  comm.Barrier();
  return SecondsSince(start);
}

void RawWrite(const std::string& path, const std::byte* data, size_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path);
  const size_t piece = 64u << 20;
  for (size_t off = 0; off < bytes;) {
    ssize_t n = ::write(fd, data + off, std::min(piece, bytes - off));
    if (n <= 0) throw std::runtime_error("write " + path);
    off += static_cast<size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
}

void RawReadInto(const std::string& path, std::byte* data, size_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path);
  const size_t piece = 64u << 20;
  for (size_t off = 0; off < bytes;) {
    ssize_t n = ::pread(fd, data + off, std::min(piece, bytes - off), static_cast<off_t>(off));
    if (n <= 0) throw std::runtime_error("pread " + path);
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  std::unique_ptr<Communicator> comm = MpiWorld();
  const int rank = comm->rank(), world = comm->size();
  int64_t mib = 256;
  int rounds = 3;
  std::string base = std::filesystem::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mib-per-rank") mib = std::stoll(argv[i + 1]);
    if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
    if (a == "--dir") base = argv[i + 1];
  }
  if (world % 2 != 0) {
    if (rank == 0) std::cerr << "mpi_bandwidth: needs an even number of ranks\n";
    return 2;
  }
  std::string root = base + "/distckpt-mpibw";
  if (rank == 0) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  comm->Barrier();
  const uint64_t unique_bytes = static_cast<uint64_t>(mib) << 20;  // per rank, written once
  nlohmann::json summary = {{"ranks", world}, {"bytes", unique_bytes * world}, {"dir", root}};

  for (const Layout& l : {Layout{"plain", world, 1}, Layout{"fully_parallel", world / 2, 2}}) {
    // Rows per block: the unique bytes (world x mib) split over l.tp blocks per tensor.
    const int64_t rows = static_cast<int64_t>(unique_bytes) * world / l.tp / kTensors / (kCols * 4);
    Node state = BlockState(l, rank, rows, true);
    Node request = BlockState(l, rank, rows, false);
    // Destinations touched once, as a training job's parameters are and as
    // the raw reader's buffer is: else the first round's load alone pays the
    // page faults of 256 MiB per rank (fully parallel: 0.6 of the later
    // rounds' bandwidth on the 16-core machine).
    for (auto& [key, node] : request.as<Dict>()) {
      Tensor& t = node.as<ShardedTensor>().data;
      std::memset(t.data(), 0, t.nbytes());
    }
    std::unique_ptr<Communicator> dp_group = comm->Split(rank % l.tp, rank / l.tp);
    // Raw: every rank writes an equal share of the unique bytes (as the
    // fully parallel save aims to), from its own state's memory.
    std::vector<std::byte> raw_buffer(unique_bytes);
    std::memcpy(raw_buffer.data(), state.at("w0").as<ShardedTensor>().data.data(),
                std::min<size_t>(unique_bytes, rows * kCols * 4));
    const std::string other_name = l.dp > 1 ? "load_cold_plain_strategy" : "load_cold_unverified";
    std::vector<double> save_ratio, load_ratio, other_ratio;
    for (int round = 0; round < rounds; ++round) {
      const std::string raw = fmt::format("{}/raw_{}_{}", root, l.name, rank);
      const std::string dir = fmt::format("{}/ckpt_{}_{}", root, l.name, round);
      SaveOptions save;
      LoadOptions load;
      if (l.dp > 1) {
        save.strategy = SaveStrategy::FullyParallel(dp_group.get());
        load.strategy = LoadStrategy::FullyParallel(dp_group.get());
      }
      double raw_save = 0, ours_save = 0;
      auto run_raw_save = [&] {
        raw_save = Timed(*comm, [&] { RawWrite(raw, raw_buffer.data(), raw_buffer.size()); });
      };
      auto run_ours_save = [&] {
        ours_save = Timed(*comm, [&] { Save(state, dir, *comm, save); });
      };
      if (round % 2 == 0) {
        run_raw_save();
        run_ours_save();
      } else {
        run_ours_save();
        run_raw_save();
      }
      // Cold reads: every rank evicts its files (the checkpoint's by rank 0).
      EvictFromPageCache(raw);
      if (rank == 0) EvictFromPageCache(dir);
      double raw_load = 0, ours_load = 0;
      auto run_raw_load = [&] {
        raw_load = Timed(*comm, [&] { RawReadInto(raw, raw_buffer.data(), raw_buffer.size()); });
      };
      auto run_ours_load = [&] {
        ours_load = Timed(*comm, [&] {
          LoadResult r = Load(request, dir, *comm, load);
          if (rank == 0 && getenv("MPIBW_VERBOSE")) {
            std::cerr << fmt::format(
                "{} load: {:.3f} s, read {} B, received {} B in {} collectives, peak buffer {} "
                "B\n",
                l.name, r.summary.seconds, r.summary.bytes_read, r.summary.exchange.bytes_received,
                r.summary.exchange.collectives, r.summary.exchange.peak_buffer_bytes);
          }
        });
      };
      if (round % 2 == 0) {
        run_raw_load();
        run_ours_load();
      } else {
        run_ours_load();
        run_raw_load();
      }
      // The reference load of the same checkpoint, cold again: plain, without
      // verification (what hashing every byte costs); fully parallel, the
      // plain strategy (every rank reads its whole block, no exchange).
      LoadOptions other = l.dp > 1 ? LoadOptions{} : load;
      if (l.dp == 1) other.verify = VerifyPolicy::kNever;
      if (rank == 0) EvictFromPageCache(dir);
      const double other_load = Timed(*comm, [&] { Load(request, dir, *comm, other); });
      save_ratio.push_back(raw_save / ours_save);
      load_ratio.push_back(raw_load / ours_load);
      other_ratio.push_back(raw_load / other_load);
      if (rank == 0) {
        const double gb = static_cast<double>(unique_bytes) * world / 1e9;
        std::cout << nlohmann::json{{"layout", l.name},
                                    {"round", round},
                                    {"raw_write_GBps", gb / raw_save},
                                    {"save_GBps", gb / ours_save},
                                    {"raw_read_cold_GBps", gb / raw_load},
                                    {"load_cold_GBps", gb / ours_load},
                                    {other_name + "_GBps", gb / other_load}}
                         .dump()
                  << std::endl;
        std::filesystem::remove_all(dir);
      }
      comm->Barrier();
    }
    summary[l.name] = {{"save_over_raw_bandwidth", Median(save_ratio)},
                       {"load_over_raw_bandwidth", Median(load_ratio)},
                       {other_name + "_over_raw_bandwidth", Median(other_ratio)}};
  }
  if (rank == 0) {
    std::cout << summary.dump() << std::endl;
    std::filesystem::remove_all(root);
  }
  return 0;
}

}  // namespace
}  // namespace distckpt::bench

int main(int argc, char** argv) { return distckpt::bench::Main(argc, argv); }
