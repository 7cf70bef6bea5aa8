// Helpers shared by the benchmark binaries: scratch directories, page-cache
// eviction for cold reads, and the raw-I/O baselines every distckpt figure is
// compared with (the same bytes written to one file with write + fsync, or
// read back with pread).
//
// Thread-safety: functions are reentrant; ScratchDir is owned by one thread.
#ifndef DISTCKPT_BENCH_BENCH_UTIL_H_
#define DISTCKPT_BENCH_BENCH_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// Writes `buffers` back to back to `path` with write(2), then fsyncs it.
void RawWriteFsync(const std::string& path, const std::vector<std::vector<std::byte>>& buffers);
// Reads the file back with pread(2) into `buffers` (sizes must match the file).
void RawRead(const std::string& path, std::vector<std::vector<std::byte>>& buffers);

// Bytes in a human unit: "64KiB", "256MiB".
std::string SizeName(uint64_t bytes);

}  // namespace distckpt::bench

#endif  // DISTCKPT_BENCH_BENCH_UTIL_H_
