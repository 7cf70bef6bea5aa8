// Test helpers shared by the io/ and format/ tests: a scoped temporary
// directory, string bytes, a gmock matcher for CheckpointError, an Env
// that counts files opened for writing and the writes reaching them, and one
// that counts gathered reads.
//
// Thread-safety: ScopedTempDir::path() may be read concurrently.
#ifndef DISTCKPT_IO_TESTING_H_
#define DISTCKPT_IO_TESTING_H_

#include <gmock/gmock.h>
#include <stdlib.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/error_testing.h"  // ThrowsError
#include "io/forwarding_env.h"

namespace distckpt {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// on destruction, with the siblings a save of the directory itself leaves
// beside it: `<path>.lock` (the save lock) and `<path>.staging`.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "distckpt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  // Also removes the siblings a save of the directory itself leaves: its save
  // lock `<dir>.lock` and the staging directory of an overwrite `<dir>.staging`.
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::remove(path_ + ".lock", ec);
    std::filesystem::remove_all(path_ + ".staging", ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The bytes of `s`.
inline std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// Forwards everything; counts the files opened for writing and the writes
// that reach them (an Append, AppendGathered or WriteAt each).
class CountingEnv : public ForwardingEnv {
 public:
  using ForwardingEnv::ForwardingEnv;
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    ++opened;
    return std::make_unique<File>(ForwardingEnv::NewWritableFile(path), this);
  }
  int opened = 0;
  int writes = 0;

 private:
  class File : public ForwardingWritableFile {
   public:
    File(std::unique_ptr<WritableFile> target, CountingEnv* env)
        : ForwardingWritableFile(std::move(target)), env_(env) {}
    void Append(std::span<const std::byte> data) override {
      ++env_->writes;
      target()->Append(data);
    }
    void AppendGathered(std::span<const std::span<const std::byte>> parts) override {
      ++env_->writes;
      target()->AppendGathered(parts);
    }
    void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
      ++env_->writes;
      target()->WriteAt(offset, data);
    }

   private:
    CountingEnv* env_;
  };
};

// Counts the gathered reads (system calls, on POSIX) of the files it opens.
class GatherCountingEnv : public ForwardingEnv {
 public:
  using ForwardingEnv::ForwardingEnv;
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    return std::make_unique<File>(this, ForwardingEnv::NewRandomAccessFile(path));
  }
  uint64_t gathered() const { return gathered_; }

 private:
  class File : public RandomAccessFile {
   public:
    File(GatherCountingEnv* env, std::unique_ptr<RandomAccessFile> base)
        : env_(env), base_(std::move(base)) {}
    void Read(uint64_t offset, std::span<std::byte> dst) const override {
      base_->Read(offset, dst);
    }
    void ReadGathered(uint64_t offset, std::span<const std::span<std::byte>> parts) const override {
      ++env_->gathered_;
      base_->ReadGathered(offset, parts);
    }
    uint64_t size() const override { return base_->size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    GatherCountingEnv* env_;
    std::unique_ptr<RandomAccessFile> base_;
  };
  std::atomic<uint64_t> gathered_{0};
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_TESTING_H_
