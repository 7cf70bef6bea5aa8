// Exclusive advisory locks (flock) on lock files.
//
// LockForSave: held by one save of a checkpoint directory at a time:
// `<dir>.lock`, beside the directory (the directory itself is replaced by an
// overwrite). Lock: any lock file, e.g. the writer lock of a training run's
// root (one `train` per root). The kernel releases a lock when its holder
// exits, killed or not, so a lock file left behind never blocks a later
// holder; lock files are never unlinked (an unlink races with a second
// opener, who would then lock an orphaned inode). The file records the holder
// ("pid P on host H") so that a refusal can name it.
//
// Errors: held by another process or thread -> CheckpointError(kInvalidArgument)
// "<dir> is being saved by another save (pid P on host H, lock <dir>.lock)"
// (LockForSave) or "<what> is held by another writer (pid P on host H, lock
// <path>)" (Lock); the lock file cannot be created -> kIo naming it.
//
// Thread-safety: a FileLock is owned by one thread; locks taken by two
// threads of one process exclude each other too (one open file each).
#ifndef DISTCKPT_IO_FILE_LOCK_H_
#define DISTCKPT_IO_FILE_LOCK_H_

#include <memory>
#include <optional>
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
  // Locks `path` (created if missing) without waiting; `what` names what the
  // lock guards in the refusal.
  static std::unique_ptr<FileLock> Lock(const std::string& path, const std::string& what);
  // The holder of the lock on `path` ("pid P on host H", or "holder unknown")
  // when someone holds it, else nullopt. Creates nothing, takes nothing.
  static std::optional<std::string> HeldBy(const std::string& path);

 private:
  FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_FILE_LOCK_H_
