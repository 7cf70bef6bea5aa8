// Device-side bandwidth table for whoever holds a GPU (ci/gpu-check): one
// rank saves and loads a state of CUDA tensors, against the physical limits
// measured in the same run.
//
//   build/bench/gpu_bandwidth [--mib 1024] [--tensors 16] [--rounds 3] [--dir D] [--json F]
//
// Rows (best of --rounds, GB/s = 1e9 bytes/s):
//   D2H pinned / H2D pinned   cudaMemcpy of the whole state between device
//                             memory and page-locked host memory: the limit
//                             for staging (pageable rows for comparison)
//   staging (async save)      SaveAsync's blocking part: every device tensor
//                             copied to page-locked staging buffers (reused
//                             across rounds); ratio against D2H pinned
//   raw write+fsync / read    the same bytes written to one file in large
//                             writes + fsync, and read back after eviction
//   save (device tensors)     Save() of the device state (D2H overlapped with
//                             the writes); ratio against raw write
//   load (into device)        Load() into device tensors after eviction;
//                             ratio against raw read
//   load bf16 -> f32 device   a bf16 checkpoint into f32 device tensors,
//                             widened on the device (half the bytes cross)
// Exit status 0 with a table; 77 without a CUDA device.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/thread_world.h"
#include "core/device.h"
#include "engine/load.h"
#include "engine/save.h"
#include "engine/save_async.h"
#include "mapping/dict_utils.h"
#include "strategy/async_queue.h"
#include "strategy/staging.h"

namespace distckpt::bench {
namespace {

struct Row {
  std::string name;
  uint64_t bytes = 0;
  double seconds = 0;  // best round
  std::string against;
  double GBps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

template <typename Fn>
double Timed(Fn fn) {
  const Clock::time_point start = Clock::now();
  fn();
  return SecondsSince(start);
}

Node OnDevice(Node state, DType dtype = DType::kF32) {
  ForEachLeaf(state, [&](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (dtype != t->dtype) {
        Tensor converted = Tensor::Empty(dtype, t->data.shape());
        ConvertElements(t->data.data(), t->dtype, converted.data(), dtype,
                        static_cast<size_t>(t->data.numel()));
        t->data = converted;
        t->dtype = dtype;
      }
      t->data = t->data.To(Device::Cuda());
    }
  });
  return state;
}

Node DeviceRequest(const Node& state) {
  Node request = state;
  ForEachLeaf(request, [&](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      t->dtype = DType::kF32;
      t->data = Tensor::Empty(DType::kF32, t->local_shape, Device::Cuda());
    }
  });
  return request;
}

int Main(int argc, char** argv) {
  int64_t mib = 1024, tensors = 16;
  int rounds = 3;
  std::string dir_root, json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--mib")
      mib = std::stoll(value);
    else if (flag == "--tensors")
      tensors = std::stoll(value);
    else if (flag == "--rounds")
      rounds = std::stoi(value);
    else if (flag == "--dir")
      setenv("DISTCKPT_BENCH_DIR", value.c_str(), 1);
    else if (flag == "--json")
      json_path = value;
  }
  if (CudaDeviceCount() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  const int64_t per_tensor = mib * (1 << 20) / tensors;
  const uint64_t total = static_cast<uint64_t>(per_tensor) * tensors;
  ScratchDir scratch("gpu_bandwidth");
  Node host_state = MakeState(per_tensor, tensors);
  Node state = OnDevice(host_state);
  std::vector<Row> rows;

  // Physical limits: one device buffer and one host buffer of the whole size.
  {
    Tensor device = Tensor::Empty(DType::kU8, {static_cast<int64_t>(total)}, Device::Cuda());
    bool pinned = false;
    std::shared_ptr<std::byte> host = AllocateHostStaging(total, &pinned);
    std::memset(host.get(), 1, total);
    std::vector<std::byte> pageable(total, std::byte{1});
    auto copy = [&](void* dst, Device dd, const void* src, Device sd) {
      return Best(rounds, [&] { return Timed([&] { CopyMemory(dst, dd, src, sd, total); }); });
    };
    rows.push_back({"D2H pinned", total,
                    copy(host.get(), Device::Cpu(), device.raw_data(), Device::Cuda()), ""});
    rows.push_back({"H2D pinned", total,
                    copy(device.raw_data(), Device::Cuda(), host.get(), Device::Cpu()), ""});
    rows.push_back({"D2H pageable", total,
                    copy(pageable.data(), Device::Cpu(), device.raw_data(), Device::Cuda()),
                    "D2H pinned"});
    rows.push_back({"H2D pageable", total,
                    copy(device.raw_data(), Device::Cuda(), pageable.data(), Device::Cpu()),
                    "H2D pinned"});
  }
  // Staging: the blocking part of an async save (pool reused across rounds).
  {
    StagingPool pool;
    double best = 1e300;
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 allocates the pinned buffers
      SaveSummary summary;
      RunRanks(1, [&](Communicator& comm) {
        SaveOptions options;
        options.strategy.staging = &pool;
        options.overwrite = true;
        AsyncSave save = SaveAsync(state, scratch.Sub("async"), comm, options);
        summary.blocking_seconds = save.summary->blocking_seconds;
        AsyncCallsQueue queue(comm);
        queue.Schedule(save.request);
        queue.MaybeFinalize(/*blocking=*/true);
      });
      if (r > 0) best = std::min(best, summary.blocking_seconds);
    }
    rows.push_back({"staging (async save)", total, best, "D2H pinned"});
  }
  // Raw disk limits, then save and load of device tensors.
  std::vector<std::vector<std::byte>> raw = RawBuffers(per_tensor, tensors);
  const std::string raw_file = scratch.Sub("raw.bin");
  rows.push_back({"raw write+fsync", total,
                  Best(rounds, [&] { return Timed([&] { RawWriteFsync(raw_file, raw); }); }), ""});
  rows.push_back({"raw read (cold)", total,
                  Best(rounds, [&] { return BestRawRead(raw_file, raw, 0, /*cold=*/true); }), ""});
  const std::string ckpt = scratch.Sub("ckpt");
  rows.push_back({"save (device tensors)", total,
                  Best(rounds,
                       [&] {
                         std::filesystem::remove_all(ckpt);
                         return Timed([&] { SaveOnOneRank(state, ckpt); });
                       }),
                  "raw write+fsync"});
  Node request = DeviceRequest(host_state);
  Node loaded;
  rows.push_back({"load (into device)", total,
                  Best(rounds,
                       [&] {
                         EvictFromPageCache(ckpt);
                         return Timed([&] {
                           RunRanks(1, [&](Communicator& comm) {
                             loaded = Load(request, ckpt, comm).state_dict;
                           });
                         });
                       }),
                  "raw read (cold)"});
  // Check every loaded byte against the saved host state.
  bool exact = true;
  for (const auto& [key, node] : host_state.as<Dict>()) {
    Tensor back = loaded.at(key).as<Tensor>().To(Device::Cpu());
    exact = exact && back.Equals(node.as<ShardedTensor>().data);
  }
  const std::string bf16 = scratch.Sub("bf16");
  SaveOnOneRank(OnDevice(host_state, DType::kBF16), bf16);
  rows.push_back({"load bf16 -> f32 device", total,
                  Best(rounds,
                       [&] {
                         EvictFromPageCache(bf16);
                         return Timed([&] {
                           RunRanks(1, [&](Communicator& comm) { Load(request, bf16, comm); });
                         });
                       }),
                  "raw read (cold)"});

  auto find = [&](const std::string& name) -> const Row* {
    for (const Row& r : rows)
      if (r.name == name) return &r;
    return nullptr;
  };
  nlohmann::json report = {{"bytes", total}, {"tensors", tensors}, {"values_exact", exact}};
  std::cout << fmt::format("{} in {} f32 tensors on {}; best of {} rounds\n", SizeName(total),
                           tensors, Device::Cuda().ToString(), rounds);
  std::cout << fmt::format("{:<26} {:>9} {:>9}  {}\n", "", "GB/s", "ratio", "against");
  for (const Row& r : rows) {
    const Row* base = r.against.empty() ? nullptr : find(r.against);
    const double ratio = base ? r.GBps() / base->GBps() : 0;
    std::cout << fmt::format("{:<26} {:>9.2f} {:>9}  {}\n", r.name, r.GBps(),
                             base ? fmt::format("{:.2f}", ratio) : "", r.against);
    report["rows"].push_back({{"name", r.name},
                              {"GBps", r.GBps()},
                              {"seconds", r.seconds},
                              {"against", r.against},
                              {"ratio", ratio}});
  }
  std::cout << "loaded values bit-exact: " << (exact ? "yes" : "NO") << "\n";
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  return exact ? 0 : 1;
}

}  // namespace
}  // namespace distckpt::bench

int main(int argc, char** argv) { return distckpt::bench::Main(argc, argv); }
