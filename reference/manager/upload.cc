#include "manager/upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "manager/catalog.h"
#include "manager/manager.h"
#include "manager/tracker.h"

namespace distckpt {
namespace {

constexpr char kDcpMetadata[] = ".metadata";
constexpr char kMetadataJson[] = "metadata.json";
constexpr int kParallelFiles = 4;
constexpr uint64_t kCopyChunk = 8 << 20;

std::string BaseName(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// Every file under `dir`, relative to it, sorted; lock files left out.
void ListFiles(Env* env, const std::string& dir, const std::string& prefix,
               std::vector<std::string>& out) {
  for (const std::string& name : env->ListDir(dir)) {
    const std::string path = JoinPath(dir, name);
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    if (env->IsDirectory(path)) {
      ListFiles(env, path, rel, out);
    } else if (!name.ends_with(".lock")) {
      out.push_back(rel);
    }
  }
}

uint64_t CopyFile(Env* local, const std::string& from, Env* remote, const std::string& to) {
  std::unique_ptr<RandomAccessFile> in = local->NewRandomAccessFile(from);
  std::unique_ptr<WritableFile> out = remote->NewWritableFile(to);
  std::vector<std::byte> buffer(std::min<uint64_t>(kCopyChunk, std::max<uint64_t>(in->size(), 1)));
  for (uint64_t offset = 0; offset < in->size();) {
    const uint64_t n = std::min<uint64_t>(buffer.size(), in->size() - offset);
    in->Read(offset, std::span<std::byte>(buffer.data(), n));
    out->Append(std::span<const std::byte>(buffer.data(), n));
    offset += n;
  }
  out->Sync();
  out->Close();
  return in->size();
}

}  // namespace

UploadStats UploadIterationDir(Env* local, const std::string& local_dir, Env* remote,
                               const std::string& remote_dir,
                               const std::function<void()>& on_data_file,
                               const std::function<void()>& on_metadata,
                               const std::function<void()>& on_manifest) {
  std::vector<std::string> files;
  ListFiles(local, local_dir, "", files);
  if (std::find(files.begin(), files.end(), kManifestFile) == files.end()) {
    Fail(ErrorKind::kIncomplete, "upload: {} has no {}: not a committed iteration", local_dir,
         kManifestFile);
  }
  std::vector<std::string> data, dcp_metadata, metadata;
  for (const std::string& rel : files) {
    const std::string base = BaseName(rel);
    if (rel == kManifestFile || rel == kStartedFile) continue;
    if (base == kDcpMetadata) {
      dcp_metadata.push_back(rel);
    } else if (base == kMetadataJson) {
      metadata.push_back(rel);
    } else {
      data.push_back(rel);
    }
  }
  UploadStats stats;
  auto copy = [&](const std::string& rel) {
    const std::string to = JoinPath(remote_dir, rel);
    if (!remote->capabilities().whole_file_writes) remote->CreateDirs(DirName(to));
    return CopyFile(local, JoinPath(local_dir, rel), remote, to);
  };
  // The marker first: a cut upload leaves a directory distckpt may clear.
  const bool started = std::find(files.begin(), files.end(), kStartedFile) != files.end();
  if (started) {
    stats.bytes += copy(kStartedFile);
  } else {
    if (!remote->capabilities().whole_file_writes) remote->CreateDirs(remote_dir);
    WriteFileAtomic(remote, JoinPath(remote_dir, kStartedFile),
                    std::string("{\"writer\": \"distckpt\", \"uploaded\": true}\n"));
  }
  // The data, kParallelFiles at a time; the first error stops the rest.
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex error_mu;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t i = next++; i < data.size(); i = next++) {
      {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error) return;
      }
      try {
        bytes += copy(data[i]);
        if (on_data_file) on_data_file();
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        return;
      }
    }
  };
  {
    std::vector<std::jthread> workers;
    const size_t n = std::min<size_t>(kParallelFiles, data.size());
    for (size_t i = 1; i < n; ++i) workers.emplace_back(worker);
    worker();
  }
  if (error) std::rethrow_exception(error);
  stats.bytes += bytes;
  if (on_metadata) on_metadata();
  for (const std::string& rel : dcp_metadata) stats.bytes += copy(rel);
  for (const std::string& rel : metadata) stats.bytes += copy(rel);
  // Every directory entry durable before the manifest (a file system; an
  // object store's SyncDir does nothing).
  std::vector<std::string> dirs = {remote_dir};
  for (const std::string& rel : files) dirs.push_back(DirName(JoinPath(remote_dir, rel)));
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  for (const std::string& dir : dirs) remote->SyncDir(dir);
  if (on_manifest) on_manifest();
  const std::string manifest = ReadFileToString(local, JoinPath(local_dir, kManifestFile));
  WriteFileAtomic(remote, JoinPath(remote_dir, kManifestFile), manifest);
  stats.bytes += manifest.size();
  stats.files = data.size() + dcp_metadata.size() + metadata.size() + 2;
  return stats;
}

Uploader::Uploader(Env* local, std::string local_root, CheckpointLayout layout,
                   RetentionPolicy retention, UploadOptions options, PhaseCallback on_phase)
    : local_(local),
      local_root_(std::move(local_root)),
      layout_(layout),
      retention_(retention),
      options_(std::move(options)),
      on_phase_(std::move(on_phase)) {
  if (!options_.env || options_.root.empty())
    Fail(ErrorKind::kInvalidArgument, "upload: no remote root");
  lease_ = WriterLease::Acquire(options_.env, options_.root, options_.lease);
  thread_ = std::thread([this] { Run(); });
}

Uploader::~Uploader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  lease_.reset();
}

void Uploader::Phase(std::string_view phase, int64_t iteration) const {
  if (on_phase_) on_phase_(phase, iteration);
}

void Uploader::Log(std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  log_.push_back(std::move(line));
}

std::vector<std::string> Uploader::TakeLog() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(log_, {});
}

std::vector<int64_t> Uploader::uploaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploaded_;
}

std::vector<int64_t> Uploader::Held() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> held(queue_.begin(), queue_.end());
  if (in_flight_ >= 0) held.push_back(in_flight_);
  return held;
}

void Uploader::Enqueue(int64_t iteration) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty(); });  // one waits behind the one in flight
  queue_.push_back(iteration);
  newest_ = std::max(newest_, iteration);
  cv_.notify_all();
}

std::string Uploader::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  auto idle = [&] { return queue_.empty() && in_flight_ < 0; };
  cv_.wait(lock, idle);
  if (newest_ < 0 || !failed_.count(newest_)) return "";
  if (lost_.empty()) {  // once more: the store may be back
    log_.push_back(fmt::format("retrying the upload of iteration {}", newest_));
    queue_.push_back(newest_);
    cv_.notify_all();
    cv_.wait(lock, idle);
    if (!failed_.count(newest_)) return "";
  }
  return fmt::format("iteration {} was committed in {} but not uploaded to {}: {}", newest_,
                     local_root_, options_.root, failed_[newest_]);
}

void Uploader::Run() {
  const auto renew_every = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease.ttl) / 3,
      std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!cv_.wait_for(lock, renew_every, [&] { return stop_ || !queue_.empty(); })) {
      if (!lost_.empty()) continue;
      lock.unlock();  // idle: keep the lease fresh
      std::string error;
      try {
        lease_->Renew();
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      if (!error.empty() && lost_.empty()) {  // taken over: fatal; the store down: not yet
        if (lease_->lost()) lost_ = error;
        log_.push_back(fmt::format("warning: {}{}", error,
                                   lease_->lost() ? "" : " (the lease is renewed again later)"));
      }
      continue;
    }
    if (queue_.empty()) break;  // stop_, nothing left
    in_flight_ = queue_.front();
    queue_.pop_front();
    const int64_t iteration = in_flight_;
    const std::string lost = lost_;
    cv_.notify_all();
    lock.unlock();
    std::string error;
    try {
      if (!lost.empty()) Fail(ErrorKind::kInvalidArgument, "{}", lost);
      UploadOne(iteration);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (error.empty()) {
      failed_.erase(iteration);
      uploaded_.push_back(iteration);
    } else {
      failed_[iteration] = error;
      log_.push_back(fmt::format("warning: upload of iteration {} to {} failed: {}", iteration,
                                 options_.root, error));
      if (lease_->lost() && lost_.empty()) lost_ = error;
    }
    in_flight_ = -1;
    cv_.notify_all();
  }
}

void Uploader::UploadOne(int64_t iteration) {
  Env* remote = options_.env;
  const auto start = std::chrono::steady_clock::now();
  Phase("upload", iteration);
  lease_->Renew();
  if (std::optional<Tracker> tracker = ReadTracker(remote, options_.root);
      tracker && !tracker->release && tracker->iteration >= iteration) {
    if (tracker->iteration == iteration) {
      Log(fmt::format("iteration {} is already the one {} tracks: not uploaded again", iteration,
                      options_.root));
      return;
    }
    Fail(ErrorKind::kInvalidArgument,
         "the remote tracker of {} names iteration {}, a later one: not moved back", options_.root,
         tracker->iteration);
  }
  const std::string name = IterationDirName(layout_, iteration);
  const std::string remote_dir = JoinPath(options_.root, name);
  if (remote->IsDirectory(remote_dir)) {
    CatalogEntry entry = InspectIterationDir(remote, remote_dir, iteration, layout_);
    if (entry.foreign && !IsSaveDebris(remote, remote_dir)) {
      Fail(ErrorKind::kInvalidArgument,
           "{} holds {} that distckpt did not write; refusing to delete or replace it", remote_dir,
           entry.complete ? fmt::format("a complete {} checkpoint", entry.format)
                          : std::string("files"));
    }
    DeleteIterationDir(remote, remote_dir);
    Log(fmt::format("cleared {} (an earlier upload that did not finish, or a superseded one)",
                    remote_dir));
  }
  UploadStats stats = UploadIterationDir(
      local_, JoinPath(local_root_, name), remote, remote_dir,
      [&] { Phase("upload-data", iteration); }, [&] { Phase("upload-metadata", iteration); },
      [&] { Phase("upload-manifest", iteration); });
  Phase("upload-tracker", iteration);
  lease_->Renew();
  WriteTracker(remote, options_.root, {iteration, false});
  Phase("uploaded", iteration);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Log(fmt::format("uploaded {} to {} ({} files, {} bytes, {:.2f} s)", iteration, remote_dir,
                  stats.files, stats.bytes, seconds));
  ApplyRemoteRetention(iteration);
}

void Uploader::ApplyRemoteRetention(int64_t committed) {
  Env* remote = options_.env;
  try {
    Catalog catalog = ScanRoot(remote, options_.root, layout_);
    if (!catalog.tracker || catalog.tracker->release || catalog.tracker->iteration != committed) {
      Log(fmt::format("warning: the remote tracker of {} moved: nothing deleted there",
                      options_.root));
      return;
    }
    std::vector<int64_t> ours;
    for (const CatalogEntry& entry : catalog.entries) {
      if (entry.complete && !entry.foreign) ours.push_back(entry.iteration);
    }
    std::vector<int64_t> doomed = SupersededIterations(retention_, ours, committed);
    for (const CatalogEntry& entry : catalog.entries) {
      if (!entry.complete && !entry.foreign && entry.iteration < committed)
        doomed.push_back(entry.iteration);
    }
    for (int64_t it : doomed) {
      if (it == committed) continue;  // never what the tracker names
      const CatalogEntry* entry = catalog.Find(it);
      try {
        Phase("upload-delete", it);
        DeleteIterationDir(remote, entry->path, [&] { Phase("upload-delete-unlinked", it); });
        Log(fmt::format("deleted {} (remote retention)", entry->path));
      } catch (const std::exception& e) {
        Log(fmt::format("warning: could not delete {}: {}", entry->path, e.what()));
      }
    }
  } catch (const std::exception& e) {
    Log(fmt::format("warning: remote retention of {} skipped: {}", options_.root, e.what()));
  }
}

}  // namespace distckpt
