#include "io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>

#include "core/error.h"
#include "io/env.h"

namespace distckpt {
namespace {

int OpenLockFile(const std::string& path, bool create) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | (create ? O_CREAT : 0) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                0644);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// flock(LOCK_EX | LOCK_NB) on `fd`: 0, or the errno.
int TryFlock(int fd) {
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : errno;
}

std::string ReadHolder(int fd) {
  std::string holder(256, '\0');
  ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
  holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "holder unknown" : holder;
}

// Opens (creating) and locks `path`; `refuse(holder)` throws when another holds it.
int LockOrRefuse(const std::string& path,
                 const std::function<void(const std::string& holder)>& refuse) {
  int fd = OpenLockFile(path, true);
  if (fd < 0) FailIo("open lock file", path, errno);
  if (int err = TryFlock(fd); err != 0) {
    const std::string holder = ReadHolder(fd);
    ::close(fd);
    if (err != EWOULDBLOCK) FailIo("lock", path, err);
    refuse(holder);
    Fail(ErrorKind::kInvalidArgument, "{} is locked by {}", path, holder);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me = fmt::format("pid {} on host {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    FailIo("write lock file", path, err);
  }
  return fd;
}

class PosixFileLock : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : FileLock(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // closing releases the flock

 private:
  int fd_;
};

}  // namespace

std::unique_ptr<FileLock> FileLock::LockForSave(Env* env, const std::string& dir) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return env->LockFile(base + ".lock", dir + " is being saved by another save");
}

std::unique_ptr<FileLock> FileLock::Lock(const std::string& path, const std::string& what) {
  int fd = LockOrRefuse(path, [&](const std::string& holder) {
    Fail(ErrorKind::kInvalidArgument, "{} ({}, lock {})", what, holder, path);
  });
  return std::make_unique<PosixFileLock>(path, fd);
}

std::optional<std::string> FileLock::HeldBy(const std::string& path) {
  int fd = OpenLockFile(path, false);
  if (fd < 0) return std::nullopt;  // no lock file: nobody holds it
  const int err = TryFlock(fd);
  std::optional<std::string> holder;
  if (err == EWOULDBLOCK) holder = ReadHolder(fd);
  ::close(fd);  // releases the lock if this probe took it
  return holder;
}

}  // namespace distckpt
