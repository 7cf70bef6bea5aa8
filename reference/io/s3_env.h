// S3Env: an Env on an S3 object store (AWS S3, Ceph's RADOS Gateway, MinIO),
// over libcurl, which signs every request itself (CURLOPT_AWS_SIGV4).
//
// Paths are URIs, "s3://bucket/key": errors name them as the user wrote
// them, and JoinPath/DirName work on them as on file paths. Requests are
// path-style (ENDPOINT/bucket/key) against S3Config::endpoint.
//
// What an object store is, and what this Env makes of it:
//   - A file appears whole when its WritableFile is Closed (one PUT, or a
//     multipart upload completed at Close) or not at all: a writer destroyed
//     unclosed (an error, a crash) leaves no object; an upload a killed
//     process left is aborted by the store's lifecycle, never visible.
//     capabilities().whole_file_writes is true, so WriteFileAtomic writes in
//     place (a PUT replaces an object in one step).
//   - No rename, no writes at an offset, no locks: each is refused by name
//     (RequireCapability). A commit is data objects first, the metadata
//     object last; overwriting a committed checkpoint is refused.
//   - Directories are key prefixes; CreateDirs writes an empty "dir/" marker
//     object so that an empty directory exists; SyncDir does nothing.
//   - Reads are ranged GETs of exactly the bytes asked for, but for
//     hinted and sequential reads. RandomAccessFile::WillRead of 1 MiB or
//     more (the verified readers of format/block_reads.h hint each chunk's
//     windows) fetches exactly the hinted ranges, in pieces of 1 MiB up to
//     part_bytes / 2, `parallel` pieces ahead of the hinting thread's reads;
//     the file's other reads are then exact. Otherwise a read starting where
//     the previous one of its file ended fetches a window ahead (1 MiB,
//     doubling up to 2 part_bytes, in `parallel` GETs at once). A
//     large read or write is split into parts sent in parallel
//     (S3Config::parallel).
//   - A GET's headers are acknowledged at once (TCP_QUICKACK): a gateway with
//     Nagle's algorithm on (Ceph's) otherwise holds a small body 40 ms.
//   - Every request is retried with exponential backoff (S3Config::retries)
//     on a connection failure or reset, a timeout, a 5xx answer or SlowDown.
//
// Thread-safety: every method may be called concurrently (a curl handle per
// thread); files as env.h. Counters are atomic.
#ifndef DISTCKPT_IO_S3_ENV_H_
#define DISTCKPT_IO_S3_ENV_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "io/env.h"

namespace distckpt {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:8000", no trailing slash
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;       // AWS_SESSION_TOKEN, sent as x-amz-security-token
  int retries = 5;                 // attempts after the first
  uint64_t part_bytes = 16 << 20;  // multipart part size, and a parallel read's piece
  int parallel = 4;                // parts in flight per file
};

// The configuration the AWS tools would use: endpoint from AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, or endpoint_url of the profile in ~/.aws/config
// (AWS_CONFIG_FILE), else https://s3.REGION.amazonaws.com; keys from
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
// profile (AWS_PROFILE, "default") of ~/.aws/credentials
// (AWS_SHARED_CREDENTIALS_FILE); region from AWS_REGION, AWS_DEFAULT_REGION,
// the profile's region, else us-east-1. DISTCKPT_S3_RETRIES,
// DISTCKPT_S3_PART_MIB and DISTCKPT_S3_PARALLEL tune the rest. No keys
// anywhere: CheckpointError(kInvalidArgument) saying where it looked.
S3Config S3ConfigFromEnvironment();

// Requests and bytes on the wire, since the Env was made (or Reset).
struct S3Counters {
  std::atomic<uint64_t> requests{0};  // HTTP requests sent, retries included
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> get_requests{0};    // object reads (ranged GETs)
  std::atomic<uint64_t> bytes_received{0};  // object bytes read
  std::atomic<uint64_t> bytes_sent{0};      // object bytes written
};

class S3Env : public Env {
 public:
  explicit S3Env(S3Config config);
  ~S3Env() override;

  std::string_view name() const override { return "s3"; }
  EnvCapabilities capabilities() const override;
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
  void SyncDir(const std::string& dir) override {}

  const S3Config& config() const { return config_; }
  S3Counters& counters() { return counters_; }

  class Client;  // s3_env.cc

 private:
  S3Config config_;
  S3Counters counters_;
  std::unique_ptr<Client> client_;
};

// The process's S3Env (S3ConfigFromEnvironment at first use): what
// EnvForPath hands out for s3:// paths. (A build without libcurl has no
// S3Env; EnvForPath refuses s3:// there, by name.)
S3Env* DefaultS3Env();

}  // namespace distckpt

#endif  // DISTCKPT_IO_S3_ENV_H_
