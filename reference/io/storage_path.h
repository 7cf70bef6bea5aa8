// EnvForPath: which storage a path names, so that every command can take a
// URI as well as a path.
//   "/ckpt", "ckpt", "file:///ckpt"  -> POSIX (Env::Default()), "/ckpt"
//   "file://localhost/ckpt"          -> POSIX, "/ckpt"
//   "s3://bucket/prefix"             -> DefaultS3Env() (io/s3_env.h), the URI
//                                       itself; a build without libcurl:
//                                       CheckpointError(kUnsupported) naming it
//   any other "scheme://..."         -> kInvalidArgument naming it
// A file:// URI with another host, or an s3:// URI without a bucket, is
// kInvalidArgument. What each storage can do is Env::capabilities().
//
// Thread-safety: pure function (the Envs it returns are process-wide).
#ifndef DISTCKPT_IO_STORAGE_PATH_H_
#define DISTCKPT_IO_STORAGE_PATH_H_

#include <string>

#include "io/env.h"

namespace distckpt {

struct StoragePath {
  Env* env = nullptr;
  std::string path;  // the path within `env`
};

StoragePath EnvForPath(const std::string& uri);

// The POSIX Env, whatever Env::Default() is now.
Env* PosixStorage();

// An Env over every storage a path can name: each call goes to the storage
// of its path ("s3://..." to the S3 Env, anything else to POSIX), so code
// that takes Env::Default() reaches s3:// paths too. Its capabilities() are
// POSIX's until an s3:// path is used through EnvForPath, then S3's (the
// weakest in use: a command mixing both does what an object store can).
Env* UriEnv();

// "s3 traffic: N requests (G object reads, R retries), B bytes read, W bytes
// written" of this process's S3 Env; empty when it sent no request.
std::string StorageTrafficSummary();

// Makes Env::Default() return `env` (the CLI: UriEnv(), once a path on the
// command line is s3://). Not for libraries: set once, before any work.
void SetDefaultEnv(Env* env);

}  // namespace distckpt

#endif  // DISTCKPT_IO_STORAGE_PATH_H_
