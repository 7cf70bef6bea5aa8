// DataFiles: the data files of one checkpoint directory, opened on first use
// and kept open for the reader's lifetime (native and DCP readers share it).
//
// Errors: a missing file, or one shorter than the byte range an item needs,
// is CheckpointError(kCorruption) naming the file and `what()` (the item;
// built only on failure). With an `index` (the file that lists the items,
// e.g. DCP's `.metadata`, which has no checksum of its own), the message
// also names it: a damaged name, offset or length there is as likely a cause.
//
// Thread-safety: Open may be called concurrently; the files it returns are
// safe for concurrent reads.
#ifndef DISTCKPT_FORMAT_DATA_FILES_H_
#define DISTCKPT_FORMAT_DATA_FILES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "io/env.h"

namespace distckpt {

class DataFiles {
 public:
  using Describe = std::function<std::string()>;

  DataFiles(Env* env, std::string dir, std::string index = {})
      : env_(env), dir_(std::move(dir)), index_(std::move(index)) {}

  // The open file `name`, checked to hold bytes [offset, offset + length).
  const RandomAccessFile& Open(const std::string& name, uint64_t offset, uint64_t length,
                               const Describe& what);

 private:
  std::string Source() const;  // ", as <dir>/<index> records", or empty

  Env* const env_;
  const std::string dir_;
  const std::string index_;  // empty, or the file naming names, offsets and lengths
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<RandomAccessFile>> files_;  // guarded by mu_
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DATA_FILES_H_
