// Upload: a training run's committed checkpoints copied from its local root
// to a remote root (train --dir LOCAL --upload s3://bucket/prefix): verl's
// "save locally, then copy to HDFS", Megatron's save then copy to object
// storage. The local save is the commit the run relies on; the remote root
// is a second run root of the same layout (iteration directories, manifest,
// tracker), which `--resume auto` reads when it is newer.
//
// UploadIterationDir copies one committed iteration directory in the order
// that makes it a commit on any storage: the kStartedFile marker (the remote
// directory is distckpt's to clear if the copy never finishes), the data
// files (4 at a time; an object store's large ones in parallel parts), each
// component's .metadata, then its metadata.json, then the manifest. A copy
// cut anywhere leaves a remote directory without a manifest: incomplete, and
// ignored by every reader of the root (catalog.h).
//
// Uploader (rank 0, one background thread) uploads each iteration handed to
// it, in order, while training goes on:
//   1. the remote writer lease is renewed (still ours, writer_lease.h);
//   2. an iteration the remote tracker names, or older, is not uploaded
//      (never moves the remote tracker back); a remote directory of that
//      iteration left by an earlier cut upload (or a superseded one) is
//      deleted, manifest first — one another tool wrote is refused;
//   3. UploadIterationDir; the lease renewed again; the remote tracker written;
//   4. remote retention: the remote root's own complete iterations under the
//      run's policy (retention.h), its incomplete distckpt directories older
//      than the tracker's, each deleted manifest first; never the tracker's
//      iteration, never one another tool wrote.
// So the remote tracker only ever names a fully uploaded iteration, and the
// remote last good checkpoint is deleted only once a newer one is tracked.
// A failed upload (the store down past the retries) is logged; the next
// iteration is uploaded over it; Wait() retries the newest once more and
// reports it if it still fails. Iterations queued or in flight are Held():
// local retention keeps them until they are uploaded. At most one waits
// behind the one in flight: Enqueue blocks (a run cannot commit faster than
// it uploads without filling its disk).
//
// Phases (on_phase, the crash tests): "upload" (before the lease check),
// "upload-data" (after each data file), "upload-metadata" (before the
// metadata files), "upload-manifest", "upload-tracker", "uploaded" (after
// the tracker), "upload-delete" / "upload-delete-unlinked" (remote retention).
//
// Thread-safety: Enqueue, Held, TakeLog, Wait and the destructor may be
// called from any one thread at a time; the upload runs on the Uploader's own.
#ifndef DISTCKPT_MANAGER_UPLOAD_H_
#define DISTCKPT_MANAGER_UPLOAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io/env.h"
#include "manager/layout.h"
#include "manager/retention.h"
#include "manager/writer_lease.h"

namespace distckpt {

struct UploadOptions {
  Env* env = nullptr;  // the remote storage; nullptr: no upload
  std::string root;    // the remote run root ("s3://bucket/prefix", a path)
  LeaseOptions lease;
};

using PhaseCallback = std::function<void(std::string_view phase, int64_t iteration)>;

struct UploadStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
};

// Copies `local_dir` (committed) to `remote_dir` in commit order (above).
// `on_data_file` runs after each data file, `on_metadata` before the
// metadata files, `on_manifest` before the manifest (each may be empty).
UploadStats UploadIterationDir(Env* local, const std::string& local_dir, Env* remote,
                               const std::string& remote_dir,
                               const std::function<void()>& on_data_file = nullptr,
                               const std::function<void()>& on_metadata = nullptr,
                               const std::function<void()>& on_manifest = nullptr);

class Uploader {
 public:
  // Takes the remote root's writer lease (CheckpointError naming the holder).
  Uploader(Env* local, std::string local_root, CheckpointLayout layout, RetentionPolicy retention,
           UploadOptions options, PhaseCallback on_phase);
  // Uploads what is queued, then stops and releases the lease.
  ~Uploader();

  void Enqueue(int64_t iteration);
  std::vector<int64_t> Held() const;   // queued or in flight
  std::vector<std::string> TakeLog();  // progress and warnings since the last call
  // Waits for every queued upload. Returns "" when the newest iteration
  // enqueued is on the remote root (retried once if it failed), else why not.
  std::string Wait();
  std::vector<int64_t> uploaded() const;
  const UploadOptions& options() const { return options_; }

 private:
  void Run();
  void UploadOne(int64_t iteration);
  void ApplyRemoteRetention(int64_t committed);
  void Log(std::string line);
  void Phase(std::string_view phase, int64_t iteration) const;

  Env* local_;
  std::string local_root_;
  CheckpointLayout layout_;
  RetentionPolicy retention_;
  UploadOptions options_;
  PhaseCallback on_phase_;
  std::unique_ptr<WriterLease> lease_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int64_t> queue_;
  int64_t in_flight_ = -1;
  int64_t newest_ = -1;                    // the newest iteration enqueued
  std::map<int64_t, std::string> failed_;  // iteration -> why (until uploaded)
  std::vector<int64_t> uploaded_;
  std::vector<std::string> log_;
  std::string lost_;  // the lease was taken over: no more uploads
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_UPLOAD_H_
