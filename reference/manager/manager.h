// CheckpointManager: the training loop's side of checkpointing (Megatron's
// training/checkpointing.py, verl's checkpoint managers): where a save goes,
// what it holds, when it counts, how many are kept and where a run resumes.
//
// Save(iteration, state) — collective over `comm`:
//   1. rank 0 clears ROOT/<iteration dir> if a crashed or superseded attempt
//      of distckpt left one there (never the tracker's checkpoint, never a
//      directory another tool wrote: refused), then creates it with the
//      kStartedFile marker; a save older than the tracker's iteration is
//      refused (it would move the tracker back);
//   2. every component (Megatron: the iteration directory itself; verl:
//      actor/, critic/...) is saved with the engine's Save, or SaveAsync
//      (options.async) whose writers run in the background;
//   3. commit — at once for a sync save, in the finalize of the last
//      component's async request otherwise: rank 0 checks every component
//      is a committed checkpoint, writes the manifest, then the tracker
//      (temp + fsync + rename + directory fsync). A failure anywhere before
//      leaves the tracker on the previous checkpoint, on every rank;
//   4. retention (after the tracker is durable): rank 0 rebuilds the list
//      of complete checkpoints from disk and deletes the superseded ones
//      (retention.h), manifest first, so a crash mid-delete leaves an
//      incomplete directory, never a damaged "complete" one, and their save
//      locks; incomplete directories distckpt started, older than the
//      committed iteration, are removed too. Iterations another tool wrote
//      (Megatron's own) are never deleted by retention.
//      Deletion problems are warnings, not save failures.
// The tracker never names a directory that is not complete, and the
// checkpoint it names is never deleted.
//
// Contents (verl's save_contents / load_contents): each component's state
// is a dict {content: subtree}; only `save_contents` are saved, the manifest
// lists them, and Load refuses to load a content the checkpoint lacks.
//
// Resume(spec) — collective: "auto" (the tracker; no tracker = start from
// scratch), a directory path, or an iteration number. Every rank resolves it
// and the ranks agree on the iteration with a max all-reduce (Megatron's
// read_metadata); a rank that saw another iteration is reported. Incomplete
// directories are ignored and reported; a tracker naming an incomplete or
// missing directory is CheckpointError(kIncomplete). With options.upload,
// "auto" takes the remote tracker's iteration when it is newer than the
// local one (the local root lost or behind: another machine) and an
// iteration missing locally is looked for there; such a point is read
// remotely (ResumePoint::remote), nothing is downloaded.
//
// Upload (options.upload, upload.h): after the local tracker names a
// committed iteration, rank 0 hands it to the Uploader, whose thread copies
// it to the remote root while training goes on; local retention keeps the
// iterations still queued or in flight there.
//
// One writer per root: the constructor (collective when options.lock_root)
// has rank 0 take ROOT/kWriterLockFile (io/file_lock.h) for the manager's
// lifetime; a second manager on the root — another `train`, in this process
// or any other on the host — is refused naming the holder. Without it two
// runs could clear and commit one iteration at once (the tracker once named
// a directory the other run had just cleared).
//
// Non-persistent checkpoints (options.transient; Megatron's
// --non-persistent-save-interval into ROOT/non_persistent/): retention keeps
// only the committed iteration (and newer saves still in flight), and a save
// may move the tracker back (a run resumed from an older persistent
// checkpoint replaces the abandoned newer one).
//
// Thread-safety: one manager per rank, used by that rank's thread.
#ifndef DISTCKPT_MANAGER_MANAGER_H_
#define DISTCKPT_MANAGER_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "engine/load.h"
#include "engine/options.h"
#include "io/env.h"
#include "io/file_lock.h"
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/retention.h"
#include "manager/upload.h"
#include "mapping/state_dict.h"
#include "strategy/async_queue.h"

namespace distckpt {

// component -> (content -> subtree). Megatron's single component is "".
using IterationState = std::map<std::string, std::map<std::string, Node>>;

struct ManagerOptions {
  std::string root;
  CheckpointLayout layout = CheckpointLayout::kMegatron;
  // verl: the component subfolders (default {"actor"}); Megatron: ignored ({""}).
  std::vector<std::string> components;
  std::vector<std::string> save_contents = {"model", "optimizer", "extra"};
  RetentionPolicy retention;
  bool clean_incomplete = true;  // retention also removes older incomplete directories
  bool async = false;
  std::string topology;    // recorded in the manifest and the checkpoints
  SaveOptions save;        // format, env, strategy... (dir-independent)
  bool transient = false;  // a non-persistent root (above)
  bool lock_root = true;   // one writer per root (above)
  std::chrono::milliseconds async_timeout = std::chrono::minutes(10);
  // A remote root each committed iteration is copied to (upload.h); rank 0
  // takes its writer lease at construction. Not for a transient root.
  UploadOptions upload;
  // Called at each step of a save, for logs and crash tests: "save" and
  // "written" (every rank: before the components are saved / after they
  // were, or for async once their writers are scheduled), "manifest",
  // "tracker", "committed", "delete" and "delete-unlinked" (rank 0: before
  // the manifest, before the tracker, after it, before deleting a
  // superseded directory, after its manifest went and before the rest).
  std::function<void(std::string_view phase, int64_t iteration)> on_phase;
};

struct ResumePoint {
  bool found = false;  // false: start from scratch (iteration 0)
  int64_t iteration = 0;
  bool release = false;
  std::string dir;      // the iteration directory
  Env* env = nullptr;   // the storage of `dir` (nullptr: the manager's)
  bool remote = false;  // `dir` lies in the upload root (options.upload)
  IterationManifest manifest;
  bool foreign = false;               // written by another tool (catalog.h): no contents listed
  std::vector<std::string> ignored;   // incomplete directories seen, with why
  std::vector<std::string> warnings;  // e.g. ranks that saw another iteration
};

struct ManagerEvent {  // what the manager did, for logs and tests
  std::string what;    // "committed", "deleted", "cleared", "warning"
  int64_t iteration = 0;
  std::string detail;
};

class CheckpointManager {
 public:
  // Collective when options.lock_root (rank 0 takes the root's writer lock;
  // CheckpointError(kInvalidArgument) naming the holder on every rank).
  CheckpointManager(ManagerOptions options, Communicator& comm);
  // Does not finalize pending async saves (no collectives): call Finalize(true).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  const ManagerOptions& options() const { return options_; }
  std::string IterationDir(int64_t iteration) const;

  // Collective. `state` must hold every component, each with every content
  // of save_contents (extra contents are not saved).
  void Save(int64_t iteration, const IterationState& state);
  // Collective: finalizes (commits) the async saves whose writers finished
  // everywhere; blocking: all of them. Returns the iterations committed.
  std::vector<int64_t> Finalize(bool blocking);
  size_t pending() const { return queue_->pending(); }

  ResumePoint Resume(const std::string& spec);
  // Collective: loads `request`'s `contents` of `component` from `point`.
  // Returns the loaded tree {content: subtree}.
  LoadResult Load(const ResumePoint& point, const std::string& component, const Node& request,
                  const std::vector<std::string>& contents, const LoadOptions& options = {});

  // Rank-local view of the root (no collectives).
  Catalog Scan() const;
  // Rank 0 with options.upload (others: nothing): waits for the uploads
  // queued; "" or why the newest committed iteration is not uploaded
  // (Uploader::Wait). The progress lines of the uploads since the last call.
  std::string WaitUploads();
  std::vector<std::string> TakeUploadLog();
  std::vector<int64_t> Uploaded() const;
  const std::vector<ManagerEvent>& events() const { return events_; }

 private:
  void Commit(int64_t iteration);
  void ApplyRetention(int64_t committed);
  void ClearForSave(int64_t iteration);
  void Phase(std::string_view phase, int64_t iteration) const;
  Env* env() const;

  ManagerOptions options_;
  Communicator& comm_;
  std::unique_ptr<FileLock> root_lock_;  // rank 0, options.lock_root; outlives queue_
  std::unique_ptr<Uploader> uploader_;   // rank 0, options.upload
  std::unique_ptr<AsyncCallsQueue> queue_;
  std::map<int, int64_t> async_iteration_;  // queue call index -> iteration it commits
  std::vector<ManagerEvent> events_;
};

// Whether iteration directory `dir` holds nothing but what a save (or an
// upload) killed before its kStartedFile marker leaves: nothing, or the
// marker's temp file. Such a directory is distckpt's to clear.
bool IsSaveDebris(Env* env, const std::string& dir);

// Deletes one iteration directory crash-safely: manifest first (then a
// directory fsync), then the rest, kStartedFile last (a delete cut short
// leaves a directory distckpt clears, never one that looks like another
// tool's), then a fsync of the root.
// `on_unlinked` (optional) runs between the manifest removal and the rest.
void DeleteIterationDir(Env* env, const std::string& path,
                        const std::function<void()>& on_unlinked = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_MANAGER_H_
