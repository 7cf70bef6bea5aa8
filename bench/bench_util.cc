#include "bench_util.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
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

namespace {

// The raw baselines move the buffers in as few system calls as the kernel
// takes (pwritev / preadv of up to IOV_MAX buffers, at most kRawIoBytes per
// call): large I/O whatever the tensor size, not distckpt's piece size.
constexpr size_t kRawIoBytes = size_t{64} << 20;

template <typename Buffers, typename Call>
void RawVectorIo(const std::string& path, Buffers& buffers, const char* what, Call call) {
  int fd = ::open(path.c_str(), std::strcmp(what, "pwritev") == 0
                                    ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC
                                    : O_RDONLY | O_CLOEXEC,
                  0644);
  if (fd < 0) Die("open", path);
  // (buffer, offset within it) of the next byte to move, and its file offset.
  size_t b = 0, within = 0;
  off_t offset = 0;
  while (b < buffers.size()) {
    std::vector<iovec> iov;
    size_t batch = 0;
    for (size_t i = b, skip = within; i < buffers.size() && iov.size() < IOV_MAX &&
                                      batch < kRawIoBytes;
         ++i, skip = 0) {
      const size_t n = std::min(buffers[i].size() - skip, kRawIoBytes - batch);
      iov.push_back({const_cast<std::byte*>(buffers[i].data()) + skip, n});
      batch += n;
    }
    const ssize_t done = call(fd, iov.data(), static_cast<int>(iov.size()), offset);
    if (done <= 0) Die(what, path);
    offset += done;
    for (size_t left = static_cast<size_t>(done); left > 0;) {
      const size_t n = std::min(left, buffers[b].size() - within);
      left -= n;
      within += n;
      if (within == buffers[b].size()) ++b, within = 0;
    }
    while (b < buffers.size() && buffers[b].empty()) ++b;
  }
  if (std::strcmp(what, "pwritev") == 0 && ::fdatasync(fd) != 0) Die("fdatasync", path);
  ::close(fd);
}

}  // namespace

void RawWriteFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers) {
  RawVectorIo(path, buffers, "pwritev", ::pwritev);
}

void RawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers) {
  RawVectorIo(path, buffers, "preadv", ::preadv);
}

bool RawWriteDirectFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers) {
  constexpr size_t kAlign = 4096;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) return false;  // no O_DIRECT here (tmpfs)
  if (fd < 0) Die("open", path);
  // One 64 MiB aligned buffer: the bytes are copied into it, as a direct-I/O
  // writer of unaligned tensors must, and written in 64 MiB calls.
  std::byte* bounce = static_cast<std::byte*>(std::aligned_alloc(kAlign, kRawIoBytes));
  size_t fill = 0;
  auto flush = [&] {
    const size_t padded = (fill + kAlign - 1) / kAlign * kAlign;
    std::memset(bounce + fill, 0, padded - fill);
    if (padded && ::write(fd, bounce, padded) != static_cast<ssize_t>(padded)) {
      std::free(bounce);
      Die("write (O_DIRECT)", path);
    }
    fill = 0;
  };
  size_t total = 0;
  for (const auto& b : buffers) {
    for (size_t at = 0; at < b.size();) {
      const size_t n = std::min(b.size() - at, kRawIoBytes - fill);
      std::memcpy(bounce + fill, b.data() + at, n);
      fill += n, at += n, total += n;
      if (fill == kRawIoBytes) flush();
    }
  }
  flush();
  std::free(bounce);
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) Die("ftruncate", path);
  if (::fdatasync(fd) != 0) Die("fdatasync", path);
  ::close(fd);
  return true;
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
