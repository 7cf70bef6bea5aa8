#include "manager/manager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "core/json_parse.h"
#include "engine/save.h"
#include "engine/save_async.h"

namespace distckpt {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::optional<int64_t> ParseIteration(const std::string& spec) {
  int64_t value = -1;
  auto [end, ec] = std::from_chars(spec.data(), spec.data() + spec.size(), value);
  if (spec.empty() || ec != std::errc() || end != spec.data() + spec.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

std::string ComponentName(const std::string& c) { return c.empty() ? "." : c; }

}  // namespace

bool IsSaveDebris(Env* env, const std::string& dir) {
  const std::string marker_temp = std::string(kStartedFile) + ".tmp";  // WriteFileAtomic's
  for (const std::string& name : env->ListDir(dir)) {
    if (name != marker_temp) return false;
  }
  return true;
}

void DeleteIterationDir(Env* env, const std::string& path,
                        const std::function<void()>& on_unlinked) {
  std::string manifest = JoinPath(path, kManifestFile);
  if (env->FileExists(manifest)) {
    env->RemoveFile(manifest);
    env->SyncDir(path);
  }
  if (on_unlinked) on_unlinked();
  // The started marker last: a delete cut short leaves files distckpt may
  // clear, never a directory that looks like another tool's.
  for (const std::string& name : env->ListDir(path)) {
    if (name != kStartedFile) env->RemoveAll(JoinPath(path, name));
  }
  env->RemoveAll(path);
  // The engine's save lock beside it (io/file_lock.h), which a save leaves
  // behind: it would otherwise litter the root with one per deleted iteration.
  const std::string lock = path + ".lock";
  if (env->FileExists(lock)) env->RemoveFile(lock);
  env->SyncDir(DirName(path));
}

CheckpointManager::CheckpointManager(ManagerOptions options, Communicator& comm)
    : options_(std::move(options)), comm_(comm) {
  if (options_.root.empty()) Fail(ErrorKind::kInvalidArgument, "checkpoint manager: empty root");
  if (options_.layout == CheckpointLayout::kMegatron) {
    options_.components = {""};
  } else if (options_.components.empty()) {
    options_.components = {"actor"};
  }
  for (const std::string& c : options_.components) {
    if (options_.layout == CheckpointLayout::kVerl &&
        (c.empty() || c.find('/') != std::string::npos || c == "." || c == "..")) {
      Fail(ErrorKind::kInvalidArgument, "verl component '{}' must be a plain folder name", c);
    }
  }
  if (options_.save_contents.empty()) {
    Fail(ErrorKind::kInvalidArgument, "checkpoint manager: save_contents is empty");
  }
  if (options_.lock_root) {
    AgreeOnOutcome(comm_, [&] {
      if (comm_.rank() != 0) return;
      env()->CreateDirs(options_.root);
      root_lock_ = env()->LockFile(
          JoinPath(options_.root, kWriterLockFile),
          fmt::format("checkpoint root {} is held by another writer", options_.root));
    });
  }
  if (options_.upload.env && !options_.transient) {
    AgreeOnOutcome(comm_, [&] {
      if (comm_.rank() != 0) return;
      uploader_ =
          std::make_unique<Uploader>(env(), options_.root, options_.layout, options_.retention,
                                     options_.upload, options_.on_phase);
    });
  }
  queue_ = std::make_unique<AsyncCallsQueue>(comm_, options_.async_timeout);
}

CheckpointManager::~CheckpointManager() {
  queue_.reset();  // pending async saves never commit: nothing more to upload
  uploader_.reset();
}

std::string CheckpointManager::WaitUploads() { return uploader_ ? uploader_->Wait() : ""; }

std::vector<std::string> CheckpointManager::TakeUploadLog() {
  return uploader_ ? uploader_->TakeLog() : std::vector<std::string>{};
}

std::vector<int64_t> CheckpointManager::Uploaded() const {
  return uploader_ ? uploader_->uploaded() : std::vector<int64_t>{};
}

Env* CheckpointManager::env() const {
  return options_.save.env ? options_.save.env : Env::Default();
}

std::string CheckpointManager::IterationDir(int64_t iteration) const {
  return JoinPath(options_.root, IterationDirName(options_.layout, iteration));
}

void CheckpointManager::Phase(std::string_view phase, int64_t iteration) const {
  if (options_.on_phase) options_.on_phase(phase, iteration);
}

Catalog CheckpointManager::Scan() const { return ScanRoot(env(), options_.root, options_.layout); }

void CheckpointManager::ClearForSave(int64_t iteration) {
  std::string dir = IterationDir(iteration);
  bool cleared = false;
  AgreeOnOutcome(comm_, [&] {
    if (comm_.rank() != 0) return;
    Env* e = env();
    e->CreateDirs(options_.root);
    std::optional<Tracker> tracker = ReadTracker(e, options_.root);
    if (e->IsDirectory(dir)) {
      if (options_.transient && tracker && !tracker->release && tracker->iteration == iteration) {
        // A non-persistent root whose newer timeline was abandoned (resumed
        // from an older checkpoint): its tracker goes first, then the directory.
        e->RemoveFile(TrackerPath(options_.root));
        e->SyncDir(options_.root);
        tracker.reset();
      }
      if (tracker && !tracker->release && tracker->iteration == iteration) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: iteration {} is the checkpoint the tracker names; refusing to overwrite it", dir,
             iteration);
      }
      CatalogEntry entry = InspectIterationDir(e, dir, iteration, options_.layout);
      if (entry.foreign && !IsSaveDebris(e, dir)) {
        Fail(ErrorKind::kInvalidArgument,
             "{}: iteration {} holds {} that distckpt did not write; refusing to delete or "
             "replace it (move it away, or save into another root)",
             dir, iteration,
             entry.complete ? fmt::format("a complete {} checkpoint", entry.format)
                            : std::string("files"));
      }
      DeleteIterationDir(e, dir);
      cleared = true;
    }
    e->CreateDirs(dir);
    WriteFileAtomic(e, JoinPath(dir, kStartedFile),
                    fmt::format("{{\"iteration\": {}, \"writer\": \"distckpt\"}}\n", iteration));
    e->SyncDir(options_.root);
  });
  if (cleared) events_.push_back({"cleared", iteration, dir});
}

void CheckpointManager::Save(int64_t iteration, const IterationState& state) {
  AgreeOnOutcome(comm_, [&] {
    if (iteration < 0) Fail(ErrorKind::kInvalidArgument, "save: negative iteration {}", iteration);
    for (const auto& [index, pending_iteration] : async_iteration_) {
      if (pending_iteration >= iteration) {
        Fail(ErrorKind::kInvalidArgument,
             "save of iteration {} while the async save of iteration {} is pending", iteration,
             pending_iteration);
      }
    }
    if (std::optional<Tracker> tracker = ReadTracker(env(), options_.root);
        !options_.transient && tracker && !tracker->release && tracker->iteration > iteration) {
      Fail(ErrorKind::kInvalidArgument,
           "save of iteration {}: the tracker of {} names iteration {}, a later one; refusing to "
           "move it back (resume from it, or save into another root)",
           iteration, options_.root, tracker->iteration);
    }
    for (const std::string& c : options_.components) {
      auto it = state.find(c);
      if (it == state.end()) {
        Fail(ErrorKind::kInvalidArgument, "save of iteration {}: no state for component '{}'",
             iteration, ComponentName(c));
      }
      for (const std::string& content : options_.save_contents) {
        if (!it->second.count(content)) {
          Fail(ErrorKind::kInvalidArgument,
               "save of iteration {}: component '{}' has no '{}' content", iteration,
               ComponentName(c), content);
        }
      }
    }
  });
  Phase("save", iteration);
  ClearForSave(iteration);
  const std::string dir = IterationDir(iteration);
  for (size_t i = 0; i < options_.components.size(); ++i) {
    const std::string& component = options_.components[i];
    Dict tree;
    for (const std::string& content : options_.save_contents) {
      tree[content] = state.at(component).at(content);
    }
    SaveOptions save = options_.save;
    save.topology = options_.topology;
    save.content_metadata = {
        {"iteration", iteration}, {"component", component}, {"contents", options_.save_contents}};
    const std::string component_dir = ComponentDir(dir, component);
    if (!options_.async) {
      distckpt::Save(Node(std::move(tree)), component_dir, comm_, save);
      continue;
    }
    AsyncSave async = SaveAsync(Node(std::move(tree)), component_dir, comm_, save);
    if (i + 1 == options_.components.size()) {
      async.request.AddFinalize([this, iteration] { Commit(iteration); });
    }
    int index = queue_->Schedule(async.request);
    if (i + 1 == options_.components.size()) async_iteration_[index] = iteration;
  }
  Phase("written", iteration);
  if (!options_.async) Commit(iteration);
}

std::vector<int64_t> CheckpointManager::Finalize(bool blocking) {
  std::vector<int64_t> committed;
  std::vector<int> done;
  try {
    done = queue_->MaybeFinalize(blocking);
  } catch (...) {
    // The failed request was dropped by the queue: forget iterations whose
    // requests are no longer pending (their commit never ran).
    while (async_iteration_.size() > queue_->pending())
      async_iteration_.erase(async_iteration_.begin());
    throw;
  }
  for (int index : done) {
    auto it = async_iteration_.find(index);
    if (it == async_iteration_.end()) continue;
    committed.push_back(it->second);
    async_iteration_.erase(it);
  }
  return committed;
}

void CheckpointManager::Commit(int64_t iteration) {
  const std::string dir = IterationDir(iteration);
  AgreeOnOutcome(comm_, [&] {
    if (comm_.rank() != 0) return;
    Env* e = env();
    IterationManifest manifest;
    manifest.iteration = iteration;
    manifest.layout = options_.layout;
    manifest.components = options_.components;
    manifest.contents = options_.save_contents;
    manifest.topology = options_.topology;
    Phase("manifest", iteration);
    WriteFileAtomic(e, JoinPath(dir, kManifestFile), manifest.ToJson().dump(1) + "\n");
    CatalogEntry entry = InspectIterationDir(e, dir, iteration);
    if (!entry.complete) {  // a component did not commit: undo the manifest
      e->RemoveFile(JoinPath(dir, kManifestFile));
      e->SyncDir(dir);
      Fail(ErrorKind::kIncomplete, "iteration {} ({}) not committed: {}", iteration, dir,
           entry.why_incomplete);
    }
    Phase("tracker", iteration);
    try {
      WriteTracker(e, options_.root, {iteration, false});
    } catch (...) {  // not committed: leave no complete-looking directory behind
      try {
        e->RemoveFile(JoinPath(dir, kManifestFile));
      } catch (...) {
      }
      throw;
    }
  });
  events_.push_back({"committed", iteration, dir});
  if (comm_.rank() == 0) Phase("committed", iteration);
  if (uploader_) uploader_->Enqueue(iteration);
  if (comm_.rank() == 0) ApplyRetention(iteration);
  comm_.Barrier();
}

void CheckpointManager::ApplyRetention(int64_t committed) {
  Env* e = env();
  try {
    Catalog catalog = Scan();
    if (!catalog.tracker || catalog.tracker->release || catalog.tracker->iteration != committed) {
      events_.push_back({"warning", committed, "tracker moved during retention: nothing deleted"});
      return;
    }
    // Only what distckpt wrote: another tool's iterations are never deleted here.
    std::vector<int64_t> ours;
    for (const CatalogEntry& entry : catalog.entries) {
      if (entry.complete && !entry.foreign) ours.push_back(entry.iteration);
    }
    std::vector<int64_t> doomed =
        options_.transient ? ours : SupersededIterations(options_.retention, ours, committed);
    if (options_.clean_incomplete || options_.transient) {
      for (const CatalogEntry& entry : catalog.entries) {
        if (!entry.complete && !entry.foreign && entry.iteration < committed)
          doomed.push_back(entry.iteration);
      }
    }
    const std::vector<int64_t> held = uploader_ ? uploader_->Held() : std::vector<int64_t>{};
    for (int64_t it : doomed) {
      if (it == committed) continue;  // never what the tracker names
      if (std::find(held.begin(), held.end(), it) != held.end()) continue;  // not uploaded yet
      const CatalogEntry* entry = catalog.Find(it);
      try {
        Phase("delete", it);
        DeleteIterationDir(e, entry->path, [&] { Phase("delete-unlinked", it); });
        events_.push_back({"deleted", it, entry->path});
      } catch (const std::exception& ex) {
        events_.push_back({"warning", it, fmt::format("could not delete: {}", ex.what())});
      }
    }
  } catch (const std::exception& ex) {
    events_.push_back({"warning", committed, fmt::format("retention skipped: {}", ex.what())});
  }
}

ResumePoint CheckpointManager::Resume(const std::string& spec) {
  ResumePoint point;
  Catalog catalog;
  int64_t mine = -1;  // -1: nothing to resume
  bool release = false;
  bool remote = false;  // in the upload root
  std::string path_dir;
  Env* const upload = options_.upload.env;
  const std::string& upload_root = options_.upload.root;
  AgreeOnOutcome(comm_, [&] {
    Env* e = env();
    catalog = Scan();
    if (spec == "auto") {
      if (!catalog.tracker_error.empty()) Fail(ErrorKind::kCorruption, "{}", catalog.tracker_error);
      if (catalog.tracker) {
        mine = catalog.tracker->iteration;
        release = catalog.tracker->release;
      }
      // The remote root's tracker, when newer (the local root lost or behind).
      if (upload) {
        std::optional<Tracker> there = ReadTracker(upload, upload_root);
        if (there && !there->release && (!catalog.tracker || there->iteration > mine)) {
          mine = there->iteration;
          release = false;
          remote = true;
        }
      }
    } else if (std::optional<int64_t> it = ParseIteration(spec)) {
      mine = *it;
      remote = upload && !e->IsDirectory(IterationDir(mine)) &&
               upload->IsDirectory(JoinPath(upload_root, IterationDirName(options_.layout, mine)));
    } else {
      path_dir = spec;
      while (path_dir.size() > 1 && path_dir.back() == '/') path_dir.pop_back();
      std::string manifest = JoinPath(path_dir, kManifestFile);
      if (!e->IsDirectory(path_dir)) {
        Fail(ErrorKind::kIncomplete, "resume: {} is not a directory", path_dir);
      }
      if (e->FileExists(manifest)) {
        mine = IterationManifest::FromJson(ParseJson(ReadFileToString(e, manifest), manifest),
                                           manifest)
                   .iteration;
      } else {
        // Another tool's checkpoint (Megatron's iter_N): its iteration from its name.
        std::string base = path_dir.substr(path_dir.find_last_of('/') + 1);
        mine = ParseIterationDirName(options_.layout, base).value_or(0);
        CatalogEntry entry = InspectIterationDir(e, path_dir, mine, options_.layout);
        if (!entry.complete) {
          Fail(ErrorKind::kIncomplete, "resume: {} is not a complete checkpoint: {}", path_dir,
               entry.why_incomplete);
        }
      }
    }
  });
  std::vector<int64_t> agreed = {mine, release ? 1 : 0, remote ? 1 : 0};
  comm_.AllReduce(agreed, ReduceOp::kMax);
  if (agreed[0] != mine) {
    point.warnings.push_back(
        fmt::format("rank {} found iteration {} while the maximum over ranks is {}: using {}",
                    comm_.rank(), mine, agreed[0], agreed[0]));
  }
  for (const CatalogEntry& entry : catalog.entries) {
    if (!entry.complete)
      point.ignored.push_back(fmt::format("{}: {}", entry.path, entry.why_incomplete));
  }
  if (agreed[0] < 0) return point;  // nothing to resume: start from scratch
  point.found = true;
  point.iteration = agreed[1] ? 0 : agreed[0];
  point.release = agreed[1] != 0;
  point.remote = agreed[2] != 0 && path_dir.empty() && !point.release;
  point.env = point.remote ? upload : nullptr;
  point.dir = !path_dir.empty() ? path_dir
              : point.release   ? JoinPath(options_.root, kReleaseDir)
              : point.remote
                  ? JoinPath(upload_root, IterationDirName(options_.layout, point.iteration))
                  : IterationDir(point.iteration);
  AgreeOnOutcome(comm_, [&] {
    Env* e = point.remote ? upload : env();
    if (point.release && !e->FileExists(JoinPath(point.dir, kManifestFile))) {
      // A release checkpoint written by a converter: one component, model only.
      point.manifest.iteration = 0;
      point.manifest.layout = options_.layout;
      point.manifest.components = {""};
      point.manifest.contents = {"model"};
      if (!e->IsDirectory(point.dir)) {
        Fail(ErrorKind::kIncomplete, "resume: the tracker says 'release' but {} is missing",
             point.dir);
      }
      return;
    }
    CatalogEntry entry = InspectIterationDir(e, point.dir, point.iteration, options_.layout);
    point.foreign = entry.foreign;
    if (!entry.complete) {
      Fail(ErrorKind::kIncomplete, "resume ({}): iteration {} at {} is not complete: {}", spec,
           point.iteration, point.dir, entry.why_incomplete);
    }
    point.manifest = *entry.manifest;
  });
  return point;
}

LoadResult CheckpointManager::Load(const ResumePoint& point, const std::string& component,
                                   const Node& request, const std::vector<std::string>& contents,
                                   const LoadOptions& options) {
  Dict tree;
  AgreeOnOutcome(comm_, [&] {
    if (!point.found) Fail(ErrorKind::kInvalidArgument, "load: no checkpoint to resume from");
    if (!Contains(point.manifest.components, component)) {
      Fail(ErrorKind::kKeyMismatch, "{}: no component '{}' (saved: {})", point.dir,
           ComponentName(component), fmt::join(point.manifest.components, ", "));
    }
    for (const std::string& content : contents) {
      // Another tool's checkpoint lists no contents: the load's key check decides.
      if (!point.foreign && !Contains(point.manifest.contents, content)) {
        Fail(ErrorKind::kKeyMismatch, "{}: content '{}' was not saved (saved: {})", point.dir,
             content, fmt::join(point.manifest.contents, ", "));
      }
      const Dict* d = request.get_if<Dict>();
      auto it = d ? d->find(content) : Dict::const_iterator();
      if (!d || it == d->end()) {
        Fail(ErrorKind::kInvalidArgument, "load: the request has no '{}' content", content);
      }
      tree[content] = it->second;
    }
  });
  LoadOptions load = options;
  if (!load.env) load.env = point.env ? point.env : options_.save.env;
  return distckpt::Load(Node(std::move(tree)), ComponentDir(point.dir, component), comm_, load);
}

}  // namespace distckpt
