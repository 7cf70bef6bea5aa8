#include "format/data_files.h"

#include "core/error.h"

namespace distckpt {

std::string DataFiles::Source() const {
  return index_.empty() ? std::string() : ", as " + JoinPath(dir_, index_) + " records";
}

const RandomAccessFile& DataFiles::Open(const std::string& name, uint64_t offset, uint64_t length,
                                        const Describe& what) {
  const RandomAccessFile* file;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<RandomAccessFile>& slot = files_[name];
    if (!slot) {
      const std::string path = JoinPath(dir_, name);
      if (!env_->FileExists(path)) {
        Fail(ErrorKind::kCorruption, "data file {} is missing ({} is stored in it{})", path, what(),
             Source());
      }
      slot = env_->NewRandomAccessFile(path);
    }
    file = slot.get();
  }
  if (file->size() < offset || file->size() - offset < length) {
    Fail(ErrorKind::kCorruption,
         "data file {} is truncated: {} needs bytes [{}, {}){}, the file has {}", file->path(),
         what(), offset, offset + length, Source(), file->size());
  }
  return *file;
}

}  // namespace distckpt
