#include "bench_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>

#include "comm/thread_world.h"
#include "core/helper_pool.h"
#include "engine/load.h"
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

namespace {

// Calls `f` on every regular file under `path` (or on `path` itself).
template <typename F>
void ForEachFile(const std::string& path, F f) {
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::recursive_directory_iterator(path)) {
      if (entry.is_regular_file()) f(entry.path());
    }
  } else {
    f(fs::path(path));
  }
}

}  // namespace

double ResidentFraction(const std::string& path) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  uint64_t pages = 0, resident = 0;
  ForEachFile(path, [&](const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open", p.string());
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size == 0) {
      ::close(fd);
      return;
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) Die("mmap", p.string());
    std::vector<unsigned char> in_core((size + page - 1) / page);
    if (::mincore(map, size, in_core.data()) != 0) Die("mincore", p.string());
    ::munmap(map, size);
    pages += in_core.size();
    for (unsigned char c : in_core) resident += c & 1;
  });
  return pages ? static_cast<double>(resident) / static_cast<double>(pages) : 0;
}

void EvictFromPageCache(const std::string& path) {
  ForEachFile(path, [](const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open", p.string());
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  });
}

bool EvictAndCheck(const std::string& path) {
  EvictFromPageCache(path);
  return ResidentFraction(path) < 0.05;
}

int PlantedRepeats(const std::string& side) {
  const char* plant = std::getenv("DISTCKPT_BENCH_PLANT");
  return plant && side == plant ? 2 : 1;
}

namespace {

// The raw baselines move the buffers in large calls whatever the tensor size
// (pwritev / preadv of up to IOV_MAX buffers and kRawIoBytes), not in
// distckpt's piece size. The file is cut into pieces of whole iovecs.
constexpr size_t kRawIoBytes = size_t{64} << 20;

struct RawPiece {
  off_t offset = 0;  // in the file
  std::vector<iovec> iov;
};

template <typename Buffers>
std::vector<RawPiece> RawPieces(const Buffers& buffers, size_t piece_bytes) {
  std::vector<RawPiece> pieces;
  size_t in_piece = piece_bytes;  // start a new piece at the first byte
  off_t offset = 0;
  for (const auto& b : buffers) {
    for (size_t at = 0; at < b.size();) {
      if (in_piece == piece_bytes || pieces.back().iov.size() == IOV_MAX) {
        pieces.push_back({offset, {}});
        in_piece = 0;
      }
      const size_t n = std::min(b.size() - at, piece_bytes - in_piece);
      pieces.back().iov.push_back({const_cast<std::byte*>(b.data()) + at, n});
      at += n, in_piece += n, offset += static_cast<off_t>(n);
    }
  }
  return pieces;
}

// Moves one piece with `call` (pwritev or preadv), resuming after short calls.
template <typename Call>
void MovePiece(int fd, RawPiece piece, Call call, const char* what, const std::string& path) {
  iovec* iov = piece.iov.data();
  int left = static_cast<int>(piece.iov.size());
  while (left > 0) {
    ssize_t done = call(fd, iov, left, piece.offset);
    if (done <= 0) Die(what, path);
    piece.offset += done;
    for (; left > 0 && static_cast<size_t>(done) >= iov->iov_len; --left, ++iov) {
      done -= static_cast<ssize_t>(iov->iov_len);
    }
    if (left > 0) {
      iov->iov_base = static_cast<std::byte*>(iov->iov_base) + done;
      iov->iov_len -= static_cast<size_t>(done);
    }
  }
}

}  // namespace

void RawWriteFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("open", path);
  for (const RawPiece& piece : RawPieces(buffers, kRawIoBytes)) {
    MovePiece(fd, piece, ::pwritev, "pwritev", path);
  }
  if (::fdatasync(fd) != 0) Die("fdatasync", path);
  ::close(fd);
}

void RawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers, int readers,
             RawReadPattern pattern) {
  std::vector<std::span<std::byte>> spans(buffers.begin(), buffers.end());
  RawRead(path, spans, readers, pattern);
}

void RawRead(const std::string& path, const std::vector<std::span<std::byte>>& buffers, int readers,
             RawReadPattern pattern) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open", path);
  if (readers <= 0) readers = HardwareThreads();
  size_t total = 0;
  for (const auto& b : buffers) total += b.size();
  // kContiguous: pieces of a reader's share (rounded up to 4 KiB), at most
  // 64 MiB each, handed out in order so that reader r's range is contiguous.
  const size_t share = (total / static_cast<size_t>(readers) + 4095) / 4096 * 4096;
  const size_t piece_bytes = pattern == RawReadPattern::kPiecesInTurn
                                 ? size_t{8} << 20
                                 : std::max<size_t>(4096, std::min(kRawIoBytes, share));
  const std::vector<RawPiece> pieces = RawPieces(buffers, piece_bytes);
  const size_t per_reader = (pieces.size() + static_cast<size_t>(readers) - 1) / readers;
  std::atomic<size_t> next{0}, next_reader{0};
  std::atomic<bool> failed{false};
  RunWithHelpers(readers - 1, [&](size_t) {
    auto read = [&](size_t i) {
      try {
        MovePiece(fd, pieces[i], ::preadv, "preadv", path);
      } catch (...) {
        failed = true;
      }
    };
    if (pattern == RawReadPattern::kPiecesInTurn) {
      for (size_t i = next++; i < pieces.size() && !failed; i = next++) read(i);
      return;
    }
    // A helper that does not start leaves its range to the ones that run.
    for (size_t r = next_reader++; r < static_cast<size_t>(readers) && !failed; r = next_reader++) {
      for (size_t i = r * per_reader; i < std::min(pieces.size(), (r + 1) * per_reader); ++i) {
        read(i);
      }
    }
  });
  ::close(fd);
  if (failed) Die("preadv", path);
}

double BestRawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers,
                   int readers, bool cold) {
  double best = 0;
  for (RawReadPattern pattern : {RawReadPattern::kPiecesInTurn, RawReadPattern::kContiguous}) {
    if (cold) EvictFromPageCache(path);
    auto start = Clock::now();
    RawRead(path, buffers, readers, pattern);
    const double seconds = SecondsSince(start);
    if (best == 0 || seconds < best) best = seconds;
  }
  return best;
}

bool RawWriteDirectFsync(const std::string& path,
                         const std::vector<std::vector<std::byte>>& buffers) {
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

void WarmLoadBreakdown(benchmark::State& state, const std::string& dir, const Node& touched,
                       const Node& fresh, const std::string& raw,
                       std::vector<std::vector<std::byte>>& buffers) {
  LoadOptions unverified;
  unverified.verify = VerifyPolicy::kNever;
  std::map<std::string, std::vector<double>> seconds;
  RunRanks(1, [&](Communicator& comm) {
    const int readers = ThreadsPerRank(comm);
    Load(touched, dir, comm);  // warm
    RawRead(raw, buffers, readers);
    auto timed = [](auto f) {
      auto start = Clock::now();
      f();
      return SecondsSince(start);
    };
    using Parts = std::vector<std::pair<std::string, std::function<double()>>>;
    auto raw_touched = [&] { return BestRawRead(raw, buffers, readers, false); };
    const Parts touched_parts = {
        {"raw_touched", raw_touched},
        {"unverified", [&] { return timed([&] { Load(touched, dir, comm, unverified); }); }},
        {"verified", [&] { return timed([&] { Load(touched, dir, comm); }); }},
    };
    // The parts that allocate run after the others, in a loop of their own:
    // the faults of fresh memory and its freeing slow the reads that follow
    // them (a raw read into touched buffers among them: raw_touched_mixed).
    const Parts fresh_parts = {
        {"raw_touched_mixed", raw_touched},
        {"raw_fresh",
         [&] {
           std::vector<std::unique_ptr<std::byte[]>> memory;
           std::vector<std::span<std::byte>> spans;
           for (const auto& buffer : buffers) {
             memory.emplace_back(new std::byte[buffer.size()]);  // not touched
             spans.emplace_back(memory.back().get(), buffer.size());
           }
           return timed([&] { RawRead(raw, spans, readers); });
         }},
        {"fresh", [&] { return timed([&] { Load(fresh, dir, comm); }); }},
    };
    auto run = [&](const Parts& parts, size_t turn) {
      for (size_t i = 0; i < parts.size(); ++i) {
        const auto& [name, f] = parts[(turn + i) % parts.size()];
        seconds[name].push_back(f());
      }
    };
    size_t turn = 0;
    for (auto _ : state) {
      run(touched_parts, turn++);
      state.SetIterationTime(seconds["verified"].back());
    }
    for (size_t i = 0; i < turn; ++i) run(fresh_parts, i);
  });
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  };
  const double base = median(seconds["raw_touched"]);
  for (const auto& [name, v] : seconds) state.counters[name] = median(v) / base;
  state.counters["raw_touched_ms"] = base * 1e3;
}

std::string SizeName(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return fmt::format("{}GiB", bytes >> 30);
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

}  // namespace distckpt::bench
