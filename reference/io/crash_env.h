// CrashTestEnv: simulated process crashes and power losses (leveldb's
// FaultInjectionTestEnv model), for crash campaigns over real files.
//
// Every mutating operation through the env is numbered from 0: creating a
// file for writing, each Append, each file Sync, RenameFile, RemoveFile,
// RemoveAll, CreateDirs (one operation per call) and SyncDir. With
// CrashAtOperation(n), operation n does not happen (an Append writes the
// first half of its bytes: a torn write) and it and every later call through
// the env, reads included, throw CheckpointError(kIo) "simulated crash at
// operation n (<op> <path>)": the process is dead, as far as the file system
// is concerned. What the dead process wrote stays (a process crash).
//
// DropUnsyncedData() then simulates a power loss: every file written through
// the env is cut back to the length it had at its last Sync (0 if never
// synced), and every directory change (file creation, mkdir, rename,
// removal) not yet made durable by a SyncDir of the directories involved is
// undone, newest first. To undo removals and replaced rename targets, the
// env keeps what they removed under `trash_dir`, which must be on the same
// file system as the files it manages (Reset and the destructor empty it).
// After DropUnsyncedData every remaining change counts as durable.
//
// Files created by other means than this env are not tracked (they are
// durable). Paths are used as given: use one spelling per file.
//
// Thread-safety: every call is serialised by one mutex (operations get a
// total order even when many threads write), so the env is safe to share by
// the ranks of a thread world and by background writers.
#ifndef DISTCKPT_IO_CRASH_ENV_H_
#define DISTCKPT_IO_CRASH_ENV_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "io/forwarding_env.h"

namespace distckpt {

class CrashTestEnv : public ForwardingEnv {
 public:
  CrashTestEnv(Env* target, std::string trash_dir);
  ~CrashTestEnv() override;

  // Crash at operation `n` (0-based); -1: never.
  void CrashAtOperation(int64_t n);
  // Mutating operations numbered so far (attempted ones included).
  int64_t operations() const;
  bool crashed() const;
  // One line per mutating operation: "<n> <op> <path>".
  std::vector<std::string> operation_log() const;

  // Power loss after the crash (or at any moment): see above.
  void DropUnsyncedData();
  // Forgets every counter, tracked file and pending change (they become
  // durable), leaves the crashed state and empties the trash.
  void Reset();

  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override;
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  uint64_t FileSize(const std::string& path) override;
  std::vector<std::string> ListDir(const std::string& dir) override;
  void CreateDirs(const std::string& dir) override;
  void RemoveFile(const std::string& path) override;
  void RemoveAll(const std::string& path) override;
  void RenameFile(const std::string& from, const std::string& to) override;
  void SyncDir(const std::string& dir) override;

 private:
  friend class CrashWritableFile;

  // A directory change not yet durable. `dirs`: the directories whose
  // SyncDir it still waits for.
  struct PendingChange {
    enum Kind { kCreate, kMkdir, kRename, kRemove } kind;
    std::string path;    // created / removed path, rename source
    std::string to;      // rename target
    std::string backup;  // under trash_: the removed path, or the replaced rename target
    std::set<std::string> dirs;
  };

  // Numbers a mutating operation; throws if it is (or follows) the crash.
  // Returns true when this operation is the crash (an Append then tears).
  bool BeginOperation(const char* op, const std::string& path, std::unique_lock<std::mutex>& lock);
  void CheckAlive(const std::string& path) const;
  [[noreturn]] void ThrowCrashed(const std::string& path) const;
  std::string NewBackupPath();
  // Tracked files at or under `from` are now at / under `to`.
  void MoveTracked(const std::string& from, const std::string& to);

  std::string trash_;
  mutable std::mutex mu_;
  int64_t crash_at_ = -1;
  int64_t next_op_ = 0;
  bool crashed_ = false;
  std::string crash_description_;
  std::vector<std::string> log_;
  std::map<std::string, uint64_t> synced_size_;  // files written through this env
  std::vector<PendingChange> pending_;
  int64_t backups_ = 0;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_CRASH_ENV_H_
