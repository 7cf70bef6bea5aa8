#include "io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "core/error.h"
#include "io/env.h"

namespace distckpt {

FileLock::~FileLock() { ::close(fd_); }  // closing releases the flock

std::unique_ptr<FileLock> FileLock::LockForSave(const std::string& dir) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string path = base + ".lock";
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) FailIo("open lock file", path, errno);
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    std::string holder(256, '\0');
    ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd);
    if (err != EWOULDBLOCK) FailIo("lock", path, err);
    Fail(ErrorKind::kInvalidArgument,
         "{} is being saved by another save ({}, lock {}); wait for it to finish", dir,
         holder.empty() ? "holder unknown" : holder, path);
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
  return std::unique_ptr<FileLock>(new FileLock(path, fd));
}

}  // namespace distckpt
