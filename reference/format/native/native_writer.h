// NativeWriter: writes one rank's data files of a native checkpoint (format
// version 1, FORMAT.md): every tensor chunk and object payload is appended,
// as raw bytes with no header, to a data file `__<rank>_<i>.bin` that the
// writer chooses (i = its stream: 0 unless several writers share the rank's
// data, as async save's do; spreading one writer's data over several files
// only changes NativeWriter::FileFor), and its xxHash3 is recorded.
//
// Thread-safety: a writer belongs to one rank and is used by one thread.
#ifndef DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
#define DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/format.h"

namespace distckpt {

// "__<rank>_<index>.bin".
std::string DataFileName(int rank, int index);
// True exactly for the names DataFileName produces.
bool IsDataFileName(std::string_view name);

class NativeWriter : public CheckpointWriter {
 public:
  NativeWriter(Env* env, std::string dir, int rank, int stream = 0);

  StoredChunk WriteTensorChunk(const std::string& key, DType dtype, const Shape& global_shape,
                               const Box& box, const std::optional<FlatRange>& flat,
                               std::span<const std::byte> bytes) override;
  StoredObject WriteObject(const std::string& key, const std::string& unique_key,
                           const Shape& global_shape, const Shape& global_offset,
                           std::span<const std::byte> bytes) override;
  // fdatasyncs and closes every data file; the writer accepts nothing after.
  CheckpointMetadata Finish() override;
  uint64_t bytes_written() const override { return bytes_written_; }

 private:
  struct DataFile {
    std::string name;
    std::unique_ptr<WritableFile> file;
  };

  void CheckOpen() const;
  // The data file the next `length` bytes go to (opened on first use).
  DataFile& FileFor(uint64_t length);
  // Appends `bytes` and records file, offset, length, checksum and rank in `stored`.
  template <typename Stored>
  void Append(std::span<const std::byte> bytes, Stored& stored);

  Env* env_;
  std::string dir_;
  int rank_;
  int stream_;
  std::vector<DataFile> files_;
  CheckpointMetadata metadata_;
  uint64_t bytes_written_ = 0;
  bool finished_ = false;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
