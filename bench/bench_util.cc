#include "bench_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "comm/thread_world.h"
#include "engine/save.h"

namespace distckpt::bench {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& what, const std::string& path) {
  throw std::runtime_error(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

}  // namespace

ScratchDir::ScratchDir(const std::string& name) {
  const char* root = std::getenv("DISTCKPT_BENCH_DIR");
  std::string pattern = (fs::path(root ? root : fs::temp_directory_path().string()) /
                         fmt::format("distckpt-bench-{}-XXXXXX", name))
                            .string();
  if (!mkdtemp(pattern.data())) Die("mkdtemp", pattern);
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void EvictFromPageCache(const std::string& path) {
  auto evict = [](const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open", p.string());
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::recursive_directory_iterator(path)) {
      if (entry.is_regular_file()) evict(entry.path());
    }
  } else {
    evict(path);
  }
}

void RawWriteFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("open", path);
  for (const auto& b : buffers) {
    size_t done = 0;
    while (done < b.size()) {
      ssize_t n = ::write(fd, b.data() + done, b.size() - done);
      if (n < 0) Die("write", path);
      done += static_cast<size_t>(n);
    }
  }
  if (::fdatasync(fd) != 0) Die("fdatasync", path);
  ::close(fd);
}

void RawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open", path);
  off_t offset = 0;
  for (auto& b : buffers) {
    size_t done = 0;
    while (done < b.size()) {
      ssize_t n = ::pread(fd, b.data() + done, b.size() - done, offset + static_cast<off_t>(done));
      if (n <= 0) Die("pread", path);
      done += static_cast<size_t>(n);
    }
    offset += static_cast<off_t>(b.size());
  }
  ::close(fd);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ShardedTensor RampTensor(const std::string& key, int64_t bytes, float first, bool with_data) {
  const int64_t n = bytes / 4;
  ShardedTensor t;
  t.key = key;
  t.dtype = DType::kF32;
  t.local_shape = t.global_shape = {n};
  t.global_offset = {0};
  t.axis_fragmentations = Shape{1};
  if (with_data) {
    t.data = Tensor::Empty(DType::kF32, {n});
    float* p = t.data.data_as<float>();
    for (int64_t j = 0; j < n; ++j) p[j] = first + static_cast<float>(j);
  }
  return t;
}

Node MakeState(int64_t bytes, int64_t count, bool with_data) {
  Dict tensors;
  for (int64_t i = 0; i < count; ++i) {
    std::string key = "t" + std::to_string(i);
    tensors[key] = Node(RampTensor(key, bytes, static_cast<float>(i), with_data));
  }
  return Node(std::move(tensors));
}

ShardedTensor QuarterBlock(int64_t rows, int64_t cols, int rank, bool by_columns) {
  ShardedTensor t;
  t.key = "w";
  t.dtype = DType::kF32;
  t.global_shape = {rows, cols};
  t.local_shape = by_columns ? Shape{rows, cols / 4} : Shape{rows / 4, cols};
  t.global_offset = by_columns ? Shape{0, rank * cols / 4} : Shape{rank * rows / 4, 0};
  t.axis_fragmentations = by_columns ? Shape{1, 4} : Shape{4, 1};
  t.data = Tensor::Zeros(DType::kF32, t.local_shape);
  return t;
}

Node RequestFor(const Node& state, std::optional<DType> dtype) {
  Node request = state;
  for (auto& [key, node] : request.as<Dict>()) {
    ShardedTensor& t = node.as<ShardedTensor>();
    if (dtype) t.dtype = *dtype;
    t.data = Tensor::Zeros(t.dtype, t.local_shape);
  }
  return request;
}

std::vector<std::vector<std::byte>> RawBuffers(int64_t bytes, int64_t count) {
  std::vector<std::vector<std::byte>> buffers(count, std::vector<std::byte>(bytes));
  for (auto& b : buffers) std::memset(b.data(), 0x5a, b.size());
  return buffers;
}

void SaveOnOneRank(const Node& state, const std::string& dir) {
  RunRanks(1, [&](Communicator& comm) { Save(state, dir, comm); });
}

void RunPaired(benchmark::State& state, const std::string& name,
               const std::function<double()>& ours, const std::function<double()>& reference) {
  std::vector<double> ratios;
  for (auto _ : state) {
    double mine, theirs;
    if (ratios.size() % 2 == 0) {
      mine = ours();
      theirs = reference();
    } else {
      theirs = reference();
      mine = ours();
    }
    state.SetIterationTime(mine);
    ratios.push_back(theirs > 0 ? mine / theirs : 0);
  }
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  state.counters[name] = n == 0  ? 0
                         : n % 2 ? ratios[n / 2]
                                 : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
}

std::string SizeName(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return fmt::format("{}GiB", bytes >> 30);
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

}  // namespace distckpt::bench
