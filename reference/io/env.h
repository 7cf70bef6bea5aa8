// Env: the file system as distckpt uses it (leveldb's Env pattern), so tests
// can inject faults (ENOSPC after N bytes, failing fsync/rename, short reads).
//
// Every error is a CheckpointError(kIo) naming the path and strerror; reads
// past the end of a file are CheckpointError(kCorruption) "truncated file".
//
// Thread-safety: Env methods may be called concurrently; a file object is
// used by one thread at a time, except RandomAccessFile::Read, which is safe
// to call concurrently (pread).
#ifndef DISTCKPT_IO_ENV_H_
#define DISTCKPT_IO_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/file_lock.h"

namespace distckpt {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual void Append(std::span<const std::byte> data) = 0;
  // Appends `parts` in order, as Append of each would (POSIX: one writev per
  // up to IOV_MAX parts instead of a system call each).
  virtual void AppendGathered(std::span<const std::span<const std::byte>> parts) {
    for (std::span<const std::byte> part : parts) Append(part);
  }
  // Overwrites bytes already appended: [offset, offset + data.size()) must
  // lie below size() (a format patching a header once it knows the data).
  virtual void WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  virtual void Sync() = 0;            // fdatasync
  virtual void Close() = 0;           // idempotent
  virtual uint64_t size() const = 0;  // bytes appended so far
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly dst.size() bytes at offset (loops over short preads).
  virtual void Read(uint64_t offset, std::span<std::byte> dst) const = 0;
  // Reads `parts` from consecutive bytes starting at `offset`, with the bytes
  // and errors of Read of each part in turn (POSIX: one preadv for the few
  // parts a verified read of a small chunk takes, payload and its sums).
  virtual void ReadGathered(uint64_t offset, std::span<const std::span<std::byte>> parts) const {
    for (std::span<std::byte> part : parts) {
      Read(offset, part);
      offset += part.size();
    }
  }
  // A hint: the calling thread's next Reads of this file are of `ranges`
  // ({offset, length}, in the order given), each read whole or in order in
  // pieces. A store may fetch them ahead (S3: GETs in flight while the
  // reader checks the bytes before); the bytes and errors of each Read are
  // the same with or without it, and a Read elsewhere is served as ever.
  // Replaces the thread's previous hint. POSIX, memory: nothing.
  virtual void WillRead(std::span<const std::pair<uint64_t, uint64_t>> ranges) const {}
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// What an Env can do atomically. What one cannot do is refused by name
// (RequireCapability, CheckpointError(kUnsupported)) before anything is
// written, never done non-atomically: an object store has no atomic rename
// (a commit by rename would be a copy a reader can see half done), no
// writes at an offset, no locks.
struct EnvCapabilities {
  bool atomic_rename = true;  // RenameFile replaces its target in one step
  bool write_at = true;       // WritableFile::WriteAt
  bool locks = true;          // LockFile / LockHolder
  // A file appears whole at Close or not at all, and replaces any file of
  // its name in one step (an object store's PUT): WriteFileAtomic writes in
  // place without atomic rename.
  bool whole_file_writes = false;
};

class Env {
 public:
  virtual ~Env() = default;
  static Env* Default();  // POSIX

  // The storage's name in errors ("posix", "memory", "s3").
  virtual std::string_view name() const { return "posix"; }
  virtual EnvCapabilities capabilities() const { return {}; }
  // An exclusive lock on the lock file `path` (created if missing), not
  // waiting, held until the returned object is destroyed (or its holder
  // dies). Held by another: CheckpointError(kInvalidArgument) "<what>
  // (<holder>, lock <path>)". An Env without locks: kUnsupported naming it.
  virtual std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what);
  // The holder of the lock on `path` ("pid P on host H"), or nullopt when
  // nobody holds it (or the Env has no locks). Creates nothing.
  virtual std::optional<std::string> LockHolder(const std::string& path);

  virtual std::unique_ptr<WritableFile> NewWritableFile(
      const std::string& path) = 0;  // create/truncate
  virtual std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  virtual uint64_t FileSize(const std::string& path) = 0;
  virtual std::vector<std::string> ListDir(const std::string& dir) = 0;  // names, sorted, no . / ..
  virtual void CreateDirs(const std::string& dir) = 0;                   // mkdir -p
  virtual void RemoveFile(const std::string& path) = 0;
  virtual void RemoveAll(const std::string& path) = 0;  // rm -rf; missing is fine
  virtual void RenameFile(const std::string& from, const std::string& to) = 0;
  virtual void SyncDir(const std::string& dir) = 0;
};

// Throws CheckpointError(kUnsupported) "<env name> storage cannot <what>
// (no <capability>)" unless `env` has the capability.
enum class EnvCapability { kAtomicRename, kWriteAt, kLocks };
void RequireCapability(Env* env, EnvCapability capability, std::string_view what);

std::string JoinPath(const std::string& dir, const std::string& name);
// The directory holding `path` ("." for a bare name), for SyncDir after a rename.
std::string DirName(const std::string& path);

// Throws CheckpointError(kIo) "<op> <path>: <strerror(error_number)>". For Env
// implementations.
[[noreturn]] void FailIo(std::string_view op, const std::string& path, int error_number);

// Writes `contents` to `path` atomically: `path`.tmp, fsync, rename over
// `path`, fsync the directory. On failure the temp file is removed and any
// previous `path` is untouched. An Env with whole_file_writes instead (an
// object store): one write of `path` in place. An Env with neither:
// kUnsupported, nothing written.
void WriteFileAtomic(Env* env, const std::string& path, std::span<const std::byte> contents);
void WriteFileAtomic(Env* env, const std::string& path, const std::string& contents);
std::string ReadFileToString(Env* env, const std::string& path);

}  // namespace distckpt

#endif  // DISTCKPT_IO_ENV_H_
