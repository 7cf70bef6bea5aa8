// MemoryEnv: an Env holding its files in memory (leveldb's NewMemEnv), with
// POSIX's semantics where distckpt relies on them: a file is created only in
// an existing directory, ListDir lists one level sorted, RemoveAll removes a
// subtree, RenameFile replaces its target atomically (files and
// directories), an open reader keeps the bytes it opened, LockFile excludes
// a second holder in this Env. Nothing reaches the real file system: the
// format and engine suites run on it to prove that every byte distckpt
// reads or writes goes through the Env.
//
// Paths are plain strings ("/a/b" and "/a/b/" are one path); "/" exists.
//
// Thread-safety: every method may be called concurrently; files as env.h.
#ifndef DISTCKPT_IO_MEMORY_ENV_H_
#define DISTCKPT_IO_MEMORY_ENV_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "io/env.h"

namespace distckpt {

class MemoryEnv : public Env {
 public:
  MemoryEnv();
  ~MemoryEnv() override;

  std::string_view name() const override { return "memory"; }
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override;
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  uint64_t FileSize(const std::string& path) override;
  std::vector<std::string> ListDir(const std::string& dir) override;
  void CreateDirs(const std::string& dir) override;
  void RemoveFile(const std::string& path) override;
  void RemoveAll(const std::string& path) override;
  void RenameFile(const std::string& from, const std::string& to) override;
  void SyncDir(const std::string& dir) override;
  std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what) override;
  std::optional<std::string> LockHolder(const std::string& path) override;

  uint64_t bytes_stored() const;  // over every file

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_MEMORY_ENV_H_
