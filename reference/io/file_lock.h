// Exclusive advisory locks (flock) on lock files.
//
// Env::LockFile takes these locks (io/env.h): the POSIX Env with flock,
// other Envs their own way (MemoryEnv in memory; none on an object store).
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
// (LockForSave) or "<what> (pid P on host H, lock <path>)" (Lock); the
// lock file cannot be created -> kIo naming it.
//
// Thread-safety: a FileLock is owned by one thread; locks taken by two
// threads of one process exclude each other too (one open file each).
#ifndef DISTCKPT_IO_FILE_LOCK_H_
#define DISTCKPT_IO_FILE_LOCK_H_

#include <memory>
#include <optional>
#include <string>

namespace distckpt {

class Env;

class FileLock {
 public:
  virtual ~FileLock() = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::string& path() const { return path_; }

  // Locks `<dir>.lock` (a trailing '/' of `dir` ignored) through `env`
  // without waiting.
  static std::unique_ptr<FileLock> LockForSave(Env* env, const std::string& dir);
  // POSIX (flock): locks `path` (created if missing) without waiting; held
  // by another: kInvalidArgument "<what> (<holder>, lock <path>)".
  static std::unique_ptr<FileLock> Lock(const std::string& path, const std::string& what);
  // POSIX: the holder of the lock on `path` ("pid P on host H", or "holder
  // unknown") when someone holds it, else nullopt. Creates nothing.
  static std::optional<std::string> HeldBy(const std::string& path);

 protected:
  explicit FileLock(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_FILE_LOCK_H_
