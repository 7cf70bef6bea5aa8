#include "io/fault_env.h"

#include <algorithm>
#include <cerrno>

#include "core/error.h"

namespace distckpt {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  void Append(std::span<const std::byte> data) override {
    env_->CheckPath(path_, "write");
    uint64_t allowed = env_->ReserveWrite(data.size());
    base_->Append(data.first(allowed));
    if (allowed < data.size()) FailIo("write", path_, ENOSPC);
  }
  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    env_->CheckPath(path_, "write");  // the file does not grow: no space is reserved
    base_->WriteAt(offset, data);
  }
  void Sync() override {
    env_->CheckPath(path_, "fdatasync");
    if (env_->fail_syncs_) FailIo("fdatasync", path_, EIO);
    base_->Sync();
  }
  void Close() override { base_->Close(); }
  uint64_t size() const override { return base_->size(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

class FaultRandomAccessFile : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultInjectionEnv* env, std::unique_ptr<RandomAccessFile> base)
      : env_(env), base_(std::move(base)) {}

  void Read(uint64_t offset, std::span<std::byte> dst) const override {
    env_->CheckPath(path(), "read");
    base_->Read(offset, dst);
    env_->bytes_read_ += dst.size();
    ++env_->read_calls_;
  }
  uint64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionEnv* env_;
  std::unique_ptr<RandomAccessFile> base_;
};

void FaultInjectionEnv::CheckPath(const std::string& path, const char* op) const {
  if (fail_substring_ && path.find(*fail_substring_) != std::string::npos) FailIo(op, path, EIO);
}

uint64_t FaultInjectionEnv::ReserveWrite(uint64_t want) {
  uint64_t written = bytes_written_.load();
  uint64_t allowed;
  do {
    allowed = want;
    if (write_limit_) allowed = std::min(want, *write_limit_ - std::min(*write_limit_, written));
  } while (!bytes_written_.compare_exchange_weak(written, written + allowed));
  return allowed;
}

std::unique_ptr<WritableFile> FaultInjectionEnv::NewWritableFile(const std::string& path) {
  CheckPath(path, "open");
  return std::make_unique<FaultWritableFile>(this, path, target()->NewWritableFile(path));
}

std::unique_ptr<RandomAccessFile> FaultInjectionEnv::NewRandomAccessFile(const std::string& path) {
  CheckPath(path, "open");
  return std::make_unique<FaultRandomAccessFile>(this, target()->NewRandomAccessFile(path));
}

void FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  CheckPath(from, "rename");
  CheckPath(to, "rename");
  if (fail_renames_) FailIo("rename", from + " to " + to, EIO);
  target()->RenameFile(from, to);
}

void FaultInjectionEnv::SyncDir(const std::string& dir) {
  CheckPath(dir, "fsync directory");
  if (fail_syncs_) FailIo("fsync directory", dir, EIO);
  target()->SyncDir(dir);
}

}  // namespace distckpt
