// EnvForPath: which storage a path names, so that every command can take a
// URI as well as a path.
//   "/ckpt", "ckpt", "file:///ckpt"  -> POSIX (Env::Default()), "/ckpt"
//   "file://localhost/ckpt"          -> POSIX, "/ckpt"
//   "s3://bucket/prefix"             -> S3: CheckpointError(kUnsupported)
//                                       naming the URI (no S3 Env in this build)
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

}  // namespace distckpt

#endif  // DISTCKPT_IO_STORAGE_PATH_H_
