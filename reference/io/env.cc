#include "io/env.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/file_lock.h"

namespace distckpt {

std::unique_ptr<FileLock> Env::LockFile(const std::string& path, const std::string& what) {
  RequireCapability(this, EnvCapability::kLocks, fmt::format("lock {}", path));
  Fail(ErrorKind::kUnsupported, "{} storage cannot lock {}: it does not implement locks", name(),
       path);
}

std::optional<std::string> Env::LockHolder(const std::string& path) { return std::nullopt; }

void RequireCapability(Env* env, EnvCapability capability, std::string_view what) {
  const EnvCapabilities have = env->capabilities();
  const char* missing = nullptr;
  switch (capability) {
    case EnvCapability::kAtomicRename:
      if (!have.atomic_rename) missing = "atomic rename";
      break;
    case EnvCapability::kWriteAt:
      if (!have.write_at) missing = "writes at an offset";
      break;
    case EnvCapability::kLocks:
      if (!have.locks) missing = "locks";
      break;
  }
  if (missing) {
    Fail(ErrorKind::kUnsupported, "{} storage cannot {} (it has no {})", env->name(), what,
         missing);
  }
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string DirName(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void FailIo(std::string_view op, const std::string& path, int error_number) {
  Fail(ErrorKind::kIo, "{} {}: {}", op, path, std::strerror(error_number));
}

void WriteFileAtomic(Env* env, const std::string& path, std::span<const std::byte> contents) {
  const EnvCapabilities have = env->capabilities();
  if (!have.atomic_rename && have.whole_file_writes) {
    std::unique_ptr<WritableFile> file = env->NewWritableFile(path);
    file->Append(contents);
    file->Close();  // the file appears here, whole
    return;
  }
  RequireCapability(env, EnvCapability::kAtomicRename, fmt::format("replace {} atomically", path));
  const std::string tmp = path + ".tmp";
  try {
    std::unique_ptr<WritableFile> file = env->NewWritableFile(tmp);
    file->Append(contents);
    file->Sync();
    file->Close();
    env->RenameFile(tmp, path);
  } catch (...) {
    // Best effort: the original error is the one worth reporting.
    try {
      if (env->FileExists(tmp)) env->RemoveFile(tmp);
    } catch (const CheckpointError&) {
    }
    throw;
  }
  env->SyncDir(DirName(path));
}

void WriteFileAtomic(Env* env, const std::string& path, const std::string& contents) {
  WriteFileAtomic(env, path, std::as_bytes(std::span(contents.data(), contents.size())));
}

std::string ReadFileToString(Env* env, const std::string& path) {
  std::unique_ptr<RandomAccessFile> file = env->NewRandomAccessFile(path);
  std::string contents(file->size(), '\0');
  file->Read(0, std::as_writable_bytes(std::span(contents.data(), contents.size())));
  return contents;
}

}  // namespace distckpt
