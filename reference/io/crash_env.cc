#include "io/crash_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// One spelling per directory, for matching SyncDir calls with changes.
std::string Normal(const std::string& path) {
  std::string s = fs::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? "." : s;
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

bool IsUnder(const std::string& path, const std::string& prefix) {
  return path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
          path[prefix.size()] == '/');
}

}  // namespace

class CrashWritableFile : public ForwardingWritableFile {
 public:
  CrashWritableFile(CrashTestEnv* env, std::string path, std::unique_ptr<WritableFile> target)
      : ForwardingWritableFile(std::move(target)), env_(env), path_(std::move(path)) {}

  void Append(std::span<const std::byte> data) override {
    std::unique_lock lock(env_->mu_);
    if (env_->BeginOperation("write", path_, lock)) {
      target()->Append(data.first(data.size() / 2));  // a torn write
      env_->ThrowCrashed(path_);
    }
    target()->Append(data);
  }
  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    std::unique_lock lock(env_->mu_);
    if (env_->BeginOperation("write", path_, lock)) {
      target()->WriteAt(offset, data.first(data.size() / 2));  // a torn write
      env_->ThrowCrashed(path_);
    }
    target()->WriteAt(offset, data);
  }
  void Sync() override {
    std::unique_lock lock(env_->mu_);
    env_->BeginOperation("fsync", path_, lock);
    target()->Sync();
    auto it = env_->synced_size_.find(path_);
    if (it != env_->synced_size_.end()) it->second = target()->size();
  }

 private:
  CrashTestEnv* env_;
  std::string path_;
};

CrashTestEnv::CrashTestEnv(Env* target, std::string trash_dir)
    : ForwardingEnv(target), trash_(std::move(trash_dir)) {}

CrashTestEnv::~CrashTestEnv() {
  std::error_code ec;
  fs::remove_all(trash_, ec);
}

void CrashTestEnv::CrashAtOperation(int64_t n) {
  std::lock_guard lock(mu_);
  crash_at_ = n;
}

int64_t CrashTestEnv::operations() const {
  std::lock_guard lock(mu_);
  return next_op_;
}

bool CrashTestEnv::crashed() const {
  std::lock_guard lock(mu_);
  return crashed_;
}

std::vector<std::string> CrashTestEnv::operation_log() const {
  std::lock_guard lock(mu_);
  return log_;
}

void CrashTestEnv::ThrowCrashed(const std::string& path) const {
  Fail(ErrorKind::kIo, "simulated crash at operation {} (accessing {})", crash_description_, path);
}

bool CrashTestEnv::BeginOperation(const char* op, const std::string& path,
                                  std::unique_lock<std::mutex>&) {
  if (crashed_) ThrowCrashed(path);
  int64_t n = next_op_++;
  log_.push_back(fmt::format("{} {} {}", n, op, path));
  if (n != crash_at_) return false;
  crashed_ = true;
  crash_description_ = fmt::format("{}: {} {}", n, op, path);
  if (std::string_view(op) == "write") return true;
  ThrowCrashed(path);
}

void CrashTestEnv::CheckAlive(const std::string& path) const {
  std::lock_guard lock(mu_);
  if (crashed_) ThrowCrashed(path);
}

std::string CrashTestEnv::NewBackupPath() {
  fs::create_directories(trash_);
  return JoinPath(trash_, "backup-" + std::to_string(backups_++));
}

void CrashTestEnv::MoveTracked(const std::string& from, const std::string& to) {
  std::map<std::string, uint64_t> moved;
  for (auto it = synced_size_.begin(); it != synced_size_.end();) {
    if (IsUnder(it->first, from)) {
      moved[to + it->first.substr(from.size())] = it->second;
      it = synced_size_.erase(it);
    } else {
      ++it;
    }
  }
  synced_size_.merge(moved);
}

std::unique_ptr<WritableFile> CrashTestEnv::NewWritableFile(const std::string& path) {
  std::unique_lock lock(mu_);
  BeginOperation("create", path, lock);
  bool existed = Exists(path);
  auto file = ForwardingEnv::NewWritableFile(path);
  if (!existed) pending_.push_back({PendingChange::kCreate, path, "", "", {Normal(DirName(path))}});
  synced_size_[path] = 0;
  return std::make_unique<CrashWritableFile>(this, path, std::move(file));
}

std::unique_ptr<RandomAccessFile> CrashTestEnv::NewRandomAccessFile(const std::string& path) {
  CheckAlive(path);
  return ForwardingEnv::NewRandomAccessFile(path);
}

bool CrashTestEnv::FileExists(const std::string& path) {
  CheckAlive(path);
  return ForwardingEnv::FileExists(path);
}

bool CrashTestEnv::IsDirectory(const std::string& path) {
  CheckAlive(path);
  return ForwardingEnv::IsDirectory(path);
}

uint64_t CrashTestEnv::FileSize(const std::string& path) {
  CheckAlive(path);
  return ForwardingEnv::FileSize(path);
}

std::vector<std::string> CrashTestEnv::ListDir(const std::string& dir) {
  CheckAlive(dir);
  return ForwardingEnv::ListDir(dir);
}

void CrashTestEnv::CreateDirs(const std::string& dir) {
  std::unique_lock lock(mu_);
  BeginOperation("mkdir", dir, lock);
  std::vector<std::string> created;  // outermost first
  for (fs::path p = fs::path(Normal(dir)); !p.empty() && !Exists(p.string()); p = p.parent_path()) {
    created.insert(created.begin(), p.string());
    if (p == p.parent_path()) break;
  }
  ForwardingEnv::CreateDirs(dir);
  for (const std::string& d : created) {
    pending_.push_back({PendingChange::kMkdir, d, "", "", {Normal(DirName(d))}});
  }
}

void CrashTestEnv::RemoveFile(const std::string& path) {
  std::unique_lock lock(mu_);
  BeginOperation("unlink", path, lock);
  if (!Exists(path)) return ForwardingEnv::RemoveFile(path);  // its error
  std::string backup = NewBackupPath();
  fs::rename(path, backup);
  MoveTracked(path, backup);
  pending_.push_back({PendingChange::kRemove, path, "", backup, {Normal(DirName(path))}});
}

void CrashTestEnv::RemoveAll(const std::string& path) {
  std::unique_lock lock(mu_);
  BeginOperation("rmtree", path, lock);
  if (!Exists(path)) return;
  std::string backup = NewBackupPath();
  fs::rename(path, backup);
  MoveTracked(path, backup);
  pending_.push_back({PendingChange::kRemove, path, "", backup, {Normal(DirName(path))}});
}

void CrashTestEnv::RenameFile(const std::string& from, const std::string& to) {
  std::unique_lock lock(mu_);
  BeginOperation("rename", from + " -> " + to, lock);
  std::string backup;
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(to, ec)) && Exists(from)) {
    backup = NewBackupPath();
    fs::create_hard_link(to, backup);
  }
  ForwardingEnv::RenameFile(from, to);
  MoveTracked(from, to);
  pending_.push_back(
      {PendingChange::kRename, from, to, backup, {Normal(DirName(from)), Normal(DirName(to))}});
}

void CrashTestEnv::SyncDir(const std::string& dir) {
  std::unique_lock lock(mu_);
  BeginOperation("fsync-dir", dir, lock);
  ForwardingEnv::SyncDir(dir);
  const std::string d = Normal(dir);
  std::erase_if(pending_, [&](PendingChange& c) {
    c.dirs.erase(d);
    return c.dirs.empty();
  });
}

void CrashTestEnv::DropUnsyncedData() {
  std::lock_guard lock(mu_);
  std::error_code ec;
  for (const auto& [path, size] : synced_size_) {
    if (fs::is_regular_file(fs::symlink_status(path, ec)) && fs::file_size(path, ec) > size) {
      fs::resize_file(path, size, ec);
    }
  }
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    switch (it->kind) {
      case PendingChange::kCreate:
        fs::remove(it->path, ec);
        break;
      case PendingChange::kMkdir:
        fs::remove_all(it->path, ec);
        break;
      case PendingChange::kRename:
        if (Exists(it->to)) fs::rename(it->to, it->path, ec);
        if (!it->backup.empty()) fs::rename(it->backup, it->to, ec);
        break;
      case PendingChange::kRemove:
        if (Exists(it->backup)) fs::rename(it->backup, it->path, ec);
        break;
    }
  }
  pending_.clear();
  synced_size_.clear();
}

void CrashTestEnv::Reset() {
  std::lock_guard lock(mu_);
  crash_at_ = -1;
  next_op_ = 0;
  crashed_ = false;
  crash_description_.clear();
  log_.clear();
  synced_size_.clear();
  pending_.clear();
  std::error_code ec;
  fs::remove_all(trash_, ec);
}

}  // namespace distckpt
