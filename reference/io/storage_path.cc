#include "io/storage_path.h"

#include <fmt/format.h>

#include <atomic>
#include <cctype>

#include "core/error.h"
#include "core/printable.h"
#ifdef DISTCKPT_WITH_S3
#include "io/s3_env.h"
#endif

namespace distckpt {
namespace {

std::atomic<bool> s3_in_use{false};

class UriEnvImpl : public Env {
 public:
  std::string_view name() const override { return s3_in_use ? "s3" : "posix"; }
  EnvCapabilities capabilities() const override {
#ifdef DISTCKPT_WITH_S3
    if (s3_in_use) return DefaultS3Env()->capabilities();
#endif
    return PosixStorage()->capabilities();
  }
  std::unique_ptr<FileLock> LockFile(const std::string& path, const std::string& what) override {
    return For(path)->LockFile(path, what);
  }
  std::optional<std::string> LockHolder(const std::string& path) override {
    return For(path)->LockHolder(path);
  }
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    return For(path)->NewWritableFile(path);
  }
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    return For(path)->NewRandomAccessFile(path);
  }
  bool FileExists(const std::string& path) override { return For(path)->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return For(path)->IsDirectory(path); }
  uint64_t FileSize(const std::string& path) override { return For(path)->FileSize(path); }
  std::vector<std::string> ListDir(const std::string& dir) override {
    return For(dir)->ListDir(dir);
  }
  void CreateDirs(const std::string& dir) override { For(dir)->CreateDirs(dir); }
  void RemoveFile(const std::string& path) override { For(path)->RemoveFile(path); }
  void RemoveAll(const std::string& path) override { For(path)->RemoveAll(path); }
  void RenameFile(const std::string& from, const std::string& to) override {
    Env* env = For(from);
    if (env != For(to)) {
      Fail(ErrorKind::kUnsupported, "cannot rename {} to {}: they lie in different storages", from,
           to);
    }
    env->RenameFile(from, to);
  }
  void SyncDir(const std::string& dir) override { For(dir)->SyncDir(dir); }

 private:
  static Env* For(const std::string& path) {
    if (path.size() >= 5 && (path.starts_with("s3://") || path.starts_with("S3://"))) {
      return EnvForPath(path).env;
    }
    return PosixStorage();
  }
};

}  // namespace

std::string StorageTrafficSummary() {
#ifdef DISTCKPT_WITH_S3
  // (An mpirun launcher that only relaunched itself sent nothing: says nothing.)
  if (s3_in_use && DefaultS3Env()->counters().requests > 0) {
    const S3Counters& c = DefaultS3Env()->counters();
    return fmt::format(
        "s3 traffic: {} requests ({} object reads, {} retries), {} bytes read, {} bytes written",
        c.requests.load(), c.get_requests.load(), c.retries.load(), c.bytes_received.load(),
        c.bytes_sent.load());
  }
#endif
  return "";
}

Env* UriEnv() {
  static UriEnvImpl* env = new UriEnvImpl;
  return env;
}

StoragePath EnvForPath(const std::string& uri) {
  const size_t colon = uri.find("://");
  // A scheme is letters, digits, '+', '-', '.' starting with a letter (RFC 3986).
  bool is_scheme = colon != std::string::npos && colon > 0 && std::isalpha(uri[0]);
  for (size_t i = 0; is_scheme && i < colon; ++i) {
    const char c = uri[i];
    is_scheme = std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  }
  if (!is_scheme) {
    if (uri.empty()) Fail(ErrorKind::kInvalidArgument, "empty path");
    return {PosixStorage(), uri};
  }
  std::string scheme = uri.substr(0, colon);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string rest = uri.substr(colon + 3);
  if (scheme == "file") {
    const size_t slash = rest.find('/');
    const std::string host = rest.substr(0, slash);
    if (slash == std::string::npos || (!host.empty() && host != "localhost")) {
      Fail(ErrorKind::kInvalidArgument,
           "{}: a file:// URI names a local absolute path (file:///path), not host '{}'",
           Printable(uri, 300), Printable(host));
    }
    return {PosixStorage(), rest.substr(slash)};
  }
  if (scheme == "s3") {
    const std::string bucket = rest.substr(0, rest.find('/'));
    if (bucket.empty()) {
      Fail(ErrorKind::kInvalidArgument, "{}: an s3:// URI names a bucket (s3://bucket/prefix)",
           Printable(uri, 300));
    }
#ifdef DISTCKPT_WITH_S3
    // The S3Env's paths are the URIs themselves (errors name them as written).
    try {
      StoragePath where{DefaultS3Env(), "s3://" + rest};
      s3_in_use = true;
      return where;
    } catch (const CheckpointError& e) {  // no credentials: say for which path
      Fail(e.kind(), "{}: {}", Printable(uri, 300), e.what());
    }
#else
    Fail(ErrorKind::kUnsupported,
         "{}: S3 storage is not available in this distckpt build (built without libcurl); use "
         "a local path or file:// URI",
         Printable(uri, 300));
#endif
  }
  Fail(ErrorKind::kInvalidArgument,
       "{}: unknown storage scheme '{}://' (a path, file:///path or s3://bucket/prefix)",
       Printable(uri, 300), Printable(scheme));
}

}  // namespace distckpt
