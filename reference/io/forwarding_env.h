// ForwardingEnv: an Env that forwards every call to another Env (leveldb's
// EnvWrapper). Subclasses override the calls they change — fault injection,
// counting, gating — and inherit the rest.
//
// Thread-safety: as the target Env; ForwardingEnv adds no state.
#ifndef DISTCKPT_IO_FORWARDING_ENV_H_
#define DISTCKPT_IO_FORWARDING_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "io/env.h"

namespace distckpt {

class ForwardingEnv : public Env {
 public:
  explicit ForwardingEnv(Env* target) : target_(target) {}

  Env* target() const { return target_; }

  std::string_view name() const override { return target_->name(); }
  EnvCapabilities capabilities() const override { return target_->capabilities(); }
  std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what) override {
    OnAccess("lock", path);
    return target_->LockFile(path, what);
  }
  std::optional<std::string> LockHolder(const std::string& path) override {
    OnAccess("stat", path);
    return target_->LockHolder(path);
  }

  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    OnAccess("open", path);
    return target_->NewWritableFile(path);
  }
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    OnAccess("open", path);
    return target_->NewRandomAccessFile(path);
  }
  bool FileExists(const std::string& path) override {
    OnAccess("stat", path);
    return target_->FileExists(path);
  }
  bool IsDirectory(const std::string& path) override {
    OnAccess("stat", path);
    return target_->IsDirectory(path);
  }
  uint64_t FileSize(const std::string& path) override {
    OnAccess("stat", path);
    return target_->FileSize(path);
  }
  std::vector<std::string> ListDir(const std::string& dir) override {
    OnAccess("list directory", dir);
    return target_->ListDir(dir);
  }
  void CreateDirs(const std::string& dir) override {
    OnAccess("create directory", dir);
    target_->CreateDirs(dir);
  }
  void RemoveFile(const std::string& path) override {
    OnAccess("remove", path);
    target_->RemoveFile(path);
  }
  void RemoveAll(const std::string& path) override {
    OnAccess("remove", path);
    target_->RemoveAll(path);
  }
  void RenameFile(const std::string& from, const std::string& to) override {
    OnAccess("rename", from);
    OnAccess("rename", to);
    target_->RenameFile(from, to);
  }
  void SyncDir(const std::string& dir) override {
    OnAccess("fsync directory", dir);
    target_->SyncDir(dir);
  }

 protected:
  // Called by every call above before it forwards, once per path it
  // touches, with the operation as I/O errors name it ("open", "stat",
  // "remove", ...): a subclass that only needs to watch or refuse accesses
  // overrides this alone. Files opened are not watched (wrap them).
  virtual void OnAccess(const char* op, const std::string& path) {}

 private:
  Env* target_;
};

// A WritableFile forwarding to another one, for the same purpose.
class ForwardingWritableFile : public WritableFile {
 public:
  explicit ForwardingWritableFile(std::unique_ptr<WritableFile> target)
      : target_(std::move(target)) {}

  void Append(std::span<const std::byte> data) override { target_->Append(data); }
  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    target_->WriteAt(offset, data);
  }
  void Sync() override { target_->Sync(); }
  void Close() override { target_->Close(); }
  uint64_t size() const override { return target_->size(); }

 protected:
  WritableFile* target() const { return target_.get(); }

 private:
  std::unique_ptr<WritableFile> target_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_FORWARDING_ENV_H_
