// FaultInjectionEnv: wraps another Env and fails on demand, for tests of
// full disks, failing fsync/rename and crashes before commit.
//
// Thread-safety: configuration setters are not synchronised with I/O; set
// them before use. I/O counters are atomic.
#ifndef DISTCKPT_IO_FAULT_ENV_H_
#define DISTCKPT_IO_FAULT_ENV_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "io/forwarding_env.h"

namespace distckpt {

class FaultInjectionEnv : public ForwardingEnv {
 public:
  explicit FaultInjectionEnv(Env* base) : ForwardingEnv(base) {}

  // After `bytes` more bytes appended in total, appends fail with ENOSPC
  // (the append that crosses the limit writes the bytes that still fit).
  void FailWritesAfter(uint64_t bytes) { write_limit_ = bytes_written_ + bytes; }
  // Any operation on a path containing `substring` fails with EIO.
  void FailPathsContaining(std::string substring) { fail_substring_ = std::move(substring); }
  void FailRenames(bool fail) { fail_renames_ = fail; }
  void FailSyncs(bool fail) { fail_syncs_ = fail; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t read_calls() const { return read_calls_; }  // RandomAccessFile::Read calls

  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override;
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override;
  void RenameFile(const std::string& from, const std::string& to) override;
  void SyncDir(const std::string& dir) override;

 protected:
  // Every other operation: EIO on a path matching FailPathsContaining.
  void OnAccess(const char* op, const std::string& path) override { CheckPath(path, op); }

 private:
  friend class FaultWritableFile;
  friend class FaultRandomAccessFile;
  void CheckPath(const std::string& path, const char* op) const;
  // How many of `want` bytes may still be appended; reserves them.
  uint64_t ReserveWrite(uint64_t want);

  std::optional<uint64_t> write_limit_;  // on bytes_written_
  std::optional<std::string> fail_substring_;
  bool fail_renames_ = false;
  bool fail_syncs_ = false;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> read_calls_{0};
};

}  // namespace distckpt

#endif  // DISTCKPT_IO_FAULT_ENV_H_
