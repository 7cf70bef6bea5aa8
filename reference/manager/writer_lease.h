// WriterLease: one writer per remote checkpoint root (train --upload) on a
// storage with or without locks.
//
// A storage with locks (POSIX, a mounted file system): the lock file
// ROOT/distckpt_writer.lock (io/file_lock.h), held for the lease's lifetime.
//
// An object store (no locks, no compare-and-swap on radosgw 16): a lease
// object ROOT/distckpt_writer.lease naming its holder ("pid P on host H"),
// a random run id, the time it was renewed and its time to live. Acquire:
// a lease that is fresh (renewed within its ttl) and not stale (on this host,
// its process no longer runs: pid and start time) is refused naming its holder; otherwise ours is
// written, then read back after a pause (`settle`): another writer's there
// means it won, and we refuse. Renew() rewrites it (the uploader every ttl/3
// and before each remote tracker) and first checks it is still ours: a lease
// taken over is CheckpointError(kInvalidArgument) naming the new holder
// (lost() from then on); a storage error is thrown as it came (kIo), the
// lease still ours.
//
// What the lease guarantees: a second run started while the first runs (or
// within its ttl after the first died on another host) is refused at start,
// naming the first; two runs started within the same `settle` both see each
// other's lease unless one's write lands after the other's read-back, and
// the loser of an overwrite stops at its next Renew. It is not a lock: two
// runs starting together can both pass Acquire, and a run paused past its
// ttl (SIGSTOP, a swapping host) can write a tracker after another took the
// root. A store with conditional writes (If-None-Match) would make it one.
//
// Thread-safety: Renew and Release are called by one thread at a time.
#ifndef DISTCKPT_MANAGER_WRITER_LEASE_H_
#define DISTCKPT_MANAGER_WRITER_LEASE_H_

#include <chrono>
#include <memory>
#include <string>

#include "io/env.h"
#include "io/file_lock.h"

namespace distckpt {

inline constexpr char kWriterLeaseFile[] = "distckpt_writer.lease";

struct LeaseOptions {
  std::chrono::seconds ttl{60};
  std::chrono::milliseconds settle{300};
};

class WriterLease {
 public:
  // Takes the root (above); CheckpointError(kInvalidArgument) naming the holder.
  static std::unique_ptr<WriterLease> Acquire(Env* env, const std::string& root,
                                              const LeaseOptions& options = {});
  ~WriterLease();  // Release()
  // Checks the lease is still ours and rewrites it (a lock: nothing to do).
  void Renew();
  // Removes the lease object if it is still ours (best effort; never throws).
  void Release();
  const std::string& holder() const { return holder_; }
  // Renew found the lease taken over (not a storage error): it stays lost.
  bool lost() const { return lost_; }
  bool is_lock() const { return lock_ != nullptr; }

 private:
  WriterLease() = default;
  std::string Contents() const;

  Env* env_ = nullptr;
  std::string path_;
  std::string holder_;  // "pid P on host H"
  std::string run_;     // random id of this lease
  LeaseOptions options_;
  std::unique_ptr<FileLock> lock_;  // a storage with locks
  bool released_ = false;
  bool lost_ = false;
};

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_WRITER_LEASE_H_
