#include "io/memory_env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "io/file_lock.h"

namespace distckpt {

namespace {

std::string Normalize(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

struct Content {
  mutable std::mutex mu;
  std::string bytes;
};

}  // namespace

struct MemoryEnv::State {
  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<Content>> files;
  std::set<std::string> dirs = {"/", "."};
  std::map<std::string, std::string> locks;  // path -> holder

  bool ParentExists(const std::string& path) const {
    const std::string parent = DirName(path);
    return dirs.count(parent) > 0;
  }
  // Paths strictly under `dir`.
  template <typename Map>
  static auto Under(Map& m, const std::string& dir) {
    const std::string prefix = dir == "/" ? "/" : dir + "/";
    return std::make_pair(m.lower_bound(prefix), prefix);
  }
};

namespace {

class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(std::string path, std::shared_ptr<Content> content)
      : path_(std::move(path)), content_(std::move(content)) {}
  void Append(std::span<const std::byte> data) override {
    if (closed_) FailIo("write", path_, EBADF);
    std::lock_guard<std::mutex> lock(content_->mu);
    content_->bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
    size_ += data.size();
  }
  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    if (closed_) FailIo("write", path_, EBADF);
    if (offset + data.size() > size_) {
      Fail(ErrorKind::kInvalidArgument, "WriteAt [{}, {}) of {}: past the {} bytes appended",
           offset, offset + data.size(), path_, size_);
    }
    std::lock_guard<std::mutex> lock(content_->mu);
    std::memcpy(content_->bytes.data() + offset, data.data(), data.size());
  }
  void Sync() override {
    if (closed_) FailIo("fsync", path_, EBADF);
  }
  void Close() override { closed_ = true; }
  uint64_t size() const override { return size_; }

 private:
  std::string path_;
  std::shared_ptr<Content> content_;
  uint64_t size_ = 0;
  bool closed_ = false;
};

class MemoryRandomAccessFile : public RandomAccessFile {
 public:
  MemoryRandomAccessFile(std::string path, std::shared_ptr<Content> content)
      : path_(std::move(path)), content_(std::move(content)) {
    std::lock_guard<std::mutex> lock(content_->mu);
    size_ = content_->bytes.size();
  }
  void Read(uint64_t offset, std::span<std::byte> dst) const override {
    std::lock_guard<std::mutex> lock(content_->mu);
    const uint64_t have = content_->bytes.size();
    if (offset > have || dst.size() > have - offset) {
      Fail(ErrorKind::kCorruption, "truncated file {}: read of {} bytes at offset {}, size {}",
           path_, dst.size(), offset, have);
    }
    std::memcpy(dst.data(), content_->bytes.data() + offset, dst.size());
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<Content> content_;
  uint64_t size_;
};

class MemoryLock : public FileLock {
 public:
  MemoryLock(std::string path, std::function<void()> release)
      : FileLock(std::move(path)), release_(std::move(release)) {}
  ~MemoryLock() override { release_(); }

 private:
  std::function<void()> release_;
};

}  // namespace

MemoryEnv::MemoryEnv() : state_(std::make_shared<State>()) {}
MemoryEnv::~MemoryEnv() = default;

std::unique_ptr<WritableFile> MemoryEnv::NewWritableFile(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->dirs.count(p)) FailIo("open", path, EISDIR);
  if (!state_->ParentExists(p)) FailIo("open", path, ENOENT);
  auto content = std::make_shared<Content>();
  state_->files[p] = content;
  return std::make_unique<MemoryWritableFile>(path, content);
}

std::unique_ptr<RandomAccessFile> MemoryEnv::NewRandomAccessFile(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->dirs.count(p)) FailIo("open", path, EISDIR);
  auto it = state_->files.find(p);
  if (it == state_->files.end()) FailIo("open", path, ENOENT);
  return std::make_unique<MemoryRandomAccessFile>(path, it->second);
}

bool MemoryEnv::FileExists(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->files.count(p) || state_->dirs.count(p);
}

bool MemoryEnv::IsDirectory(const std::string& path) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dirs.count(Normalize(path)) > 0;
}

uint64_t MemoryEnv::FileSize(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->dirs.count(p)) return 0;
  auto it = state_->files.find(p);
  if (it == state_->files.end()) FailIo("stat", path, ENOENT);
  std::lock_guard<std::mutex> content_lock(it->second->mu);
  return it->second->bytes.size();
}

std::vector<std::string> MemoryEnv::ListDir(const std::string& dir) {
  const std::string d = Normalize(dir);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->dirs.count(d))
    FailIo("list directory", dir, state_->files.count(d) ? ENOTDIR : ENOENT);
  std::set<std::string> names;
  auto collect = [&](const auto& m) {
    auto [it, prefix] = State::Under(m, d);
    for (; it != m.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      std::string rest = it->first.substr(prefix.size());
      if (!rest.empty() && rest.find('/') == std::string::npos) names.insert(rest);
    }
  };
  collect(state_->files);
  std::map<std::string, int> dirs;
  for (const std::string& x : state_->dirs) dirs[x] = 0;
  collect(dirs);
  return {names.begin(), names.end()};
}

void MemoryEnv::CreateDirs(const std::string& dir) {
  std::string d = Normalize(dir);
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<std::string> chain;
  for (std::string p = d; !state_->dirs.count(p); p = DirName(p)) {
    if (state_->files.count(p)) FailIo("create directory", dir, ENOTDIR);
    chain.push_back(p);
    if (p == DirName(p)) break;
  }
  for (const std::string& p : chain) state_->dirs.insert(p);
}

void MemoryEnv::RemoveFile(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->dirs.count(p)) FailIo("remove", path, EISDIR);
  if (!state_->files.erase(p)) FailIo("remove", path, ENOENT);
}

void MemoryEnv::RemoveAll(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->files.erase(p);
  if (!state_->dirs.erase(p)) return;
  const std::string prefix = p == "/" ? "/" : p + "/";
  for (auto it = state_->files.lower_bound(prefix);
       it != state_->files.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
    it = state_->files.erase(it);
  for (auto it = state_->dirs.lower_bound(prefix);
       it != state_->dirs.end() && it->compare(0, prefix.size(), prefix) == 0;)
    it = state_->dirs.erase(it);
}

void MemoryEnv::RenameFile(const std::string& from, const std::string& to) {
  const std::string f = Normalize(from), t = Normalize(to);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (f == t) return;
  if (!state_->ParentExists(t)) FailIo("rename", from + " to " + to, ENOENT);
  if (auto it = state_->files.find(f); it != state_->files.end()) {
    if (state_->dirs.count(t)) FailIo("rename", from + " to " + to, EISDIR);
    state_->files[t] = it->second;
    state_->files.erase(f);
    return;
  }
  if (!state_->dirs.count(f)) FailIo("rename", from + " to " + to, ENOENT);
  if (state_->files.count(t)) FailIo("rename", from + " to " + to, ENOTDIR);
  const std::string fp = f + "/", tp = t + "/";
  if (t.compare(0, fp.size(), fp) == 0) FailIo("rename", from + " to " + to, EINVAL);
  if (state_->dirs.count(t)) {  // POSIX: only over an empty directory
    auto it = state_->dirs.lower_bound(tp);
    auto jt = state_->files.lower_bound(tp);
    if ((it != state_->dirs.end() && it->compare(0, tp.size(), tp) == 0) ||
        (jt != state_->files.end() && jt->first.compare(0, tp.size(), tp) == 0))
      FailIo("rename", from + " to " + to, ENOTEMPTY);
  }
  std::map<std::string, std::shared_ptr<Content>> moved_files;
  for (auto it = state_->files.lower_bound(fp);
       it != state_->files.end() && it->first.compare(0, fp.size(), fp) == 0;) {
    moved_files[tp + it->first.substr(fp.size())] = it->second;
    it = state_->files.erase(it);
  }
  std::set<std::string> moved_dirs = {t};
  state_->dirs.erase(f);
  for (auto it = state_->dirs.lower_bound(fp);
       it != state_->dirs.end() && it->compare(0, fp.size(), fp) == 0;) {
    moved_dirs.insert(tp + it->substr(fp.size()));
    it = state_->dirs.erase(it);
  }
  state_->files.insert(moved_files.begin(), moved_files.end());
  state_->dirs.insert(moved_dirs.begin(), moved_dirs.end());
}

void MemoryEnv::SyncDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->dirs.count(Normalize(dir))) FailIo("open directory", dir, ENOENT);
}

std::unique_ptr<FileLock> MemoryEnv::LockFile(const std::string& path, const std::string& what) {
  const std::string p = Normalize(path);
  const std::string me = "this process (memory Env)";
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->ParentExists(p)) FailIo("open lock file", path, ENOENT);
  if (auto it = state_->locks.find(p); it != state_->locks.end()) {
    Fail(ErrorKind::kInvalidArgument, "{} ({}, lock {})", what, it->second, path);
  }
  state_->locks[p] = me;
  auto content = std::make_shared<Content>();
  content->bytes = me + "\n";
  state_->files[p] = content;
  std::weak_ptr<State> weak = state_;
  return std::make_unique<MemoryLock>(path, [weak, p] {
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> l(s->mu);
      s->locks.erase(p);
    }
  });
}

std::optional<std::string> MemoryEnv::LockHolder(const std::string& path) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->locks.find(Normalize(path));
  if (it == state_->locks.end()) return std::nullopt;
  return it->second;
}

uint64_t MemoryEnv::bytes_stored() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  uint64_t n = 0;
  for (const auto& [path, content] : state_->files) {
    std::lock_guard<std::mutex> l(content->mu);
    n += content->bytes.size();
  }
  return n;
}

}  // namespace distckpt
