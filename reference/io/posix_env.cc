#include <atomic>
// Env::Default(): POSIX files. Appends use write(), reads use pread(); both
// loop over EINTR and short transfers.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "io/env.h"
#include "io/file_lock.h"
#include "io/storage_path.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void Append(std::span<const std::byte> data) override {
    const std::byte* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        FailIo("write", path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
      size_ += static_cast<uint64_t>(n);
    }
  }

  void AppendGathered(std::span<const std::span<const std::byte>> parts) override {
    std::vector<iovec> iov;
    iov.reserve(std::min<size_t>(parts.size(), IOV_MAX));
    size_t next = 0;  // parts[next] is the first not yet in iov
    while (next < parts.size() || !iov.empty()) {
      while (next < parts.size() && iov.size() < IOV_MAX) {
        std::span<const std::byte> part = parts[next++];
        if (!part.empty()) iov.push_back({const_cast<std::byte*>(part.data()), part.size()});
      }
      if (iov.empty()) break;
      ssize_t n = ::writev(fd_, iov.data(), static_cast<int>(iov.size()));
      if (n < 0) {
        if (errno == EINTR) continue;
        FailIo("write", path_, errno);
      }
      size_ += static_cast<uint64_t>(n);
      // Drop what was written: whole iovecs, then the front of a partial one.
      auto written = static_cast<size_t>(n);
      size_t whole = 0;
      while (whole < iov.size() && written >= iov[whole].iov_len) written -= iov[whole++].iov_len;
      iov.erase(iov.begin(), iov.begin() + static_cast<ptrdiff_t>(whole));
      if (written > 0) {
        iov.front().iov_base = static_cast<std::byte*>(iov.front().iov_base) + written;
        iov.front().iov_len -= written;
      }
    }
  }

  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        FailIo("write", path_, errno);
      }
      done += static_cast<size_t>(n);
    }
  }

  void Sync() override {
    if (::fdatasync(fd_) != 0) FailIo("fdatasync", path_, errno);
  }

  void Close() override {
    if (fd_ < 0) return;
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) FailIo("close", path_, errno);
  }

  uint64_t size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  void Read(uint64_t offset, std::span<std::byte> dst) const override {
    std::byte* p = dst.data();
    size_t left = dst.size();
    uint64_t pos = offset;
    while (left > 0) {
      ssize_t n = ::pread(fd_, p, left, static_cast<off_t>(pos));
      if (n < 0) {
        if (errno == EINTR) continue;
        FailIo("read", path_, errno);
      }
      if (n == 0) {
        struct stat st;
        uint64_t now = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : size_;
        Fail(ErrorKind::kCorruption, "truncated file {}: wanted {} bytes at offset {}, file has {}",
             path_, dst.size(), offset, now);
      }
      p += n;
      left -= static_cast<size_t>(n);
      pos += static_cast<uint64_t>(n);
    }
  }

  void ReadGathered(uint64_t offset, std::span<const std::span<std::byte>> parts) const override {
    if (parts.size() > IOV_MAX) return RandomAccessFile::ReadGathered(offset, parts);
    std::vector<iovec> iov;
    iov.reserve(parts.size());
    uint64_t total = 0;
    for (std::span<std::byte> part : parts) {
      iov.push_back({part.data(), part.size()});
      total += part.size();
    }
    ssize_t n;
    do {
      n = ::preadv(fd_, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(offset));
    } while (n < 0 && errno == EINTR);
    if (n >= 0 && static_cast<uint64_t>(n) == total) return;
    // Short (or failed): read again from the first part not read whole, part
    // by part, so the error is the one Read gives for that part.
    uint64_t done = n > 0 ? static_cast<uint64_t>(n) : 0;
    size_t first = 0;
    while (first < parts.size() && done >= parts[first].size()) {
      done -= parts[first].size();
      offset += parts[first++].size();
    }
    RandomAccessFile::ReadGathered(offset, parts.subspan(first));
  }

  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixEnv : public Env {
 public:
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) FailIo("open", path, errno);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  // O_NOFOLLOW: a symbolic link as the last component is refused, not
  // followed (a data file linking to /etc/passwd must not be read);
  // O_NONBLOCK: opening a FIFO does not wait for a writer. fstat then refuses
  // anything that is not a regular file (FIFO, socket, device, directory).
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0 && errno == ELOOP) {
      struct stat lst;
      if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
        Fail(ErrorKind::kCorruption,
             "{} is a symbolic link: distckpt reads only regular files and does not follow links",
             path);
      }
    }
    if (fd < 0) FailIo("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      FailIo("stat", path, err);
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      FailIo("open", path, EISDIR);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      Fail(ErrorKind::kCorruption,
           "{} is not a regular file ({}): distckpt reads only regular files", path,
           FileTypeName(st.st_mode));
    }
    // Back to blocking reads (a regular file never blocks; this keeps the
    // descriptor's flags plain for pread).
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return std::make_unique<PosixRandomAccessFile>(path, fd, static_cast<uint64_t>(st.st_size));
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  uint64_t FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) FailIo("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  std::vector<std::string> ListDir(const std::string& dir) override {
    std::error_code ec;
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) FailIo("list directory", dir, ec.value());
    std::sort(names.begin(), names.end());
    return names;
  }

  void CreateDirs(const std::string& dir) override {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) FailIo("create directory", dir, ec.value());
  }

  void RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) FailIo("remove", path, errno);
  }

  void RemoveAll(const std::string& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) FailIo("remove", path, ec.value());
  }

  void RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) FailIo("rename", from + " to " + to, errno);
  }

  std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what) override {
    return FileLock::Lock(path, what);
  }
  std::optional<std::string> LockHolder(const std::string& path) override {
    return FileLock::HeldBy(path);
  }

  void SyncDir(const std::string& dir) override {
    int fd;
    do {
      fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) FailIo("open directory", dir, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) FailIo("fsync directory", dir, err);
  }
};

}  // namespace

namespace {
std::atomic<Env*>& DefaultSlot() {
  static std::atomic<Env*> slot{PosixStorage()};
  return slot;
}
}  // namespace

Env* PosixStorage() {
  static PosixEnv* env = new PosixEnv;
  return env;
}

Env* Env::Default() { return DefaultSlot().load(std::memory_order_acquire); }

void SetDefaultEnv(Env* env) { DefaultSlot().store(env, std::memory_order_release); }

}  // namespace distckpt
