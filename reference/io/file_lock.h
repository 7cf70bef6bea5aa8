// An exclusive advisory lock (flock) on a lock file, held by one save of a
// checkpoint directory at a time: `<dir>.lock`, beside the directory (the
// directory itself is replaced by an overwrite). The kernel releases the
// lock when its holder exits, killed or not, so a lock file left behind
// never blocks a later save. The file records the holder ("pid P on host H")
// so that a refused save can name it.
//
// Errors: held by another process or thread -> CheckpointError(kInvalidArgument)
// "<dir> is being saved by another save (pid P on host H, lock <dir>.lock)";
// the lock file cannot be created -> kIo naming it.
//
// Thread-safety: a FileLock is owned by one thread; locks taken by two
// threads of one process exclude each other too (one open file each).
#ifndef DISTCKPT_IO_FILE_LOCK_H_
#define DISTCKPT_IO_FILE_LOCK_H_

#include <memory>
#include <string>

namespace distckpt {

class FileLock {
 public:
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::string& path() const { return path_; }

  // Locks `<dir>.lock` (a trailing '/' of `dir` ignored) without waiting.
  static std::unique_ptr<FileLock> LockForSave(const std::string& dir);

 private:
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_FILE_LOCK_H_
