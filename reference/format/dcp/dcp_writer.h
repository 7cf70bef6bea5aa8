// DcpWriter: writes one data file of a DCP checkpoint,
// `__<rank>_<stream>.distcp` (FORMAT.md beside this file): every tensor chunk and
// every ShardedObject becomes one item, a complete torch.save archive
// (torch_save.h), appended with no padding between items. A tensor chunk is
// saved with the chunk's shape (a flat chunk as shape (1, ..., 1, n), the
// shape Megatron's N-D flattened layout reads it with); an object as the
// list [value] (Megatron's convention).
//
// The returned metadata records each item's offset; StoredChunk.length is
// the chunk's element bytes, StoredObject.length the item's bytes. Items
// are contiguous, so an item's length is the distance to the next one (or
// to the end of the file): DcpFormat's Commit derives it from that.
//
// Errors: a chunk outside its tensor, a flat range outside its box, or
// bytes that disagree with the elements are CheckpointError
// (kInvalidArgument); a key written with two dtypes or shapes is
// kShapeMismatch; I/O errors come from Env.
//
// Thread-safety: a writer belongs to one rank and is used by one thread.
#ifndef DISTCKPT_FORMAT_DCP_DCP_WRITER_H_
#define DISTCKPT_FORMAT_DCP_DCP_WRITER_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "format/format.h"

namespace distckpt {

class ZipWriter;

// "__<rank>_<index>.distcp".
std::string DcpDataFileName(int rank, int index);
bool IsDcpDataFileName(std::string_view name);

class DcpWriter : public CheckpointWriter {
 public:
  // Writes `__<rank>_<stream>.distcp` (one file per writer thread, as DCP's).
  DcpWriter(Env* env, std::string dir, int rank, int stream, std::string format_name);

  StoredChunk WriteTensorChunk(const std::string& key, DType dtype, const Shape& global_shape,
                               const Box& box, const std::optional<FlatRange>& flat,
                               std::span<const std::byte> bytes) override;
  StoredObject WriteObject(const std::string& key, const std::string& unique_key,
                           const Shape& global_shape, const Shape& global_offset,
                           std::span<const std::byte> bytes) override;
  // fdatasyncs and closes the data file; the writer accepts nothing after.
  CheckpointMetadata Finish() override;
  uint64_t bytes_written() const override { return bytes_written_; }

 private:
  void CheckOpen() const;
  // Appends one item (the records `write` adds to a torch.save archive);
  // returns its offset in the data file.
  uint64_t AppendItem(const std::function<void(ZipWriter&)>& write);

  Env* env_;
  std::string dir_;
  int rank_;
  std::string file_name_;
  std::unique_ptr<WritableFile> file_;
  CheckpointMetadata metadata_;
  uint64_t bytes_written_ = 0;
  bool finished_ = false;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_WRITER_H_
