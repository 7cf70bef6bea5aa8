// NativeWriter: writes one rank's data files of a native checkpoint (format
// version 2, FORMAT.md): every tensor chunk and object payload is appended,
// as raw bytes with no header, to a data file `__<rank>_<i>.bin` that the
// writer chooses (i = its stream: 0 unless several writers share the rank's
// data, as async save's do); a chunk's per-block checksums and an object's
// checksum (block_checksums.h) are recorded. Checks and
// bookkeeping: data_file_writer.h.
//
// Thread-safety: a writer belongs to one rank and is used by one thread.
#ifndef DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
#define DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_

#include <optional>
#include <string>
#include <string_view>

#include "format/data_file_writer.h"

namespace distckpt {

// "__<rank>_<index>.bin".
std::string DataFileName(int rank, int index);
// True exactly for the names DataFileName produces.
bool IsDataFileName(std::string_view name);

class NativeWriter : public DataFileWriter {
 public:
  NativeWriter(Env* env, std::string dir, int rank, int stream = 0);

 private:
  void StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                  std::span<const std::byte> bytes) override;
  void StoreObject(StoredObject& object, std::span<const std::byte> bytes) override;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
