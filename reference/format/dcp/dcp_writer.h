// DcpWriter: writes one data file of a DCP checkpoint,
// `__<rank>_<stream>.distcp` (FORMAT.md beside this file): every tensor chunk and
// every ShardedObject becomes one item, a complete torch.save archive
// (torch_save.h), appended with no padding between items. A tensor chunk is
// saved with the chunk's shape (a flat chunk as shape (1, ..., 1, n), the
// shape Megatron's N-D flattened layout reads it with); an object as the
// list [value] (Megatron's convention), or, given an ObjectRecord's bytes of
// kTorchSaveEncoding (a zip archive), as those bytes.
//
// The returned metadata records each item's offset; StoredChunk.length is
// the chunk's element bytes, StoredObject.length the item's bytes. Items
// are contiguous, so an item's length is the distance to the next one (or
// to the end of the items): DcpFormat's Commit derives it from that. After
// the last item, Finish appends the item index of the file's tensor items
// (item_index.h: data offsets, CRC32s, block CRC32s), which torch never reads.
//
// Errors: those of DataFileWriter (data_file_writer.h: chunk checks and
// bookkeeping), an object payload that is not JSON (kInvalidArgument), and
// one that is a zip archive without data.pkl (kCorruption).
//
// Hashing: as the native writer's (native_writer.h), helper-pool threads
// (SetHelpers) compute the CRCs of large records while they are written and
// of small records handed over together (WriteTensorChunks) ahead of them.
//
// Thread-safety: a writer belongs to one rank and is used by one thread.
#ifndef DISTCKPT_FORMAT_DCP_DCP_WRITER_H_
#define DISTCKPT_FORMAT_DCP_DCP_WRITER_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "format/data_file_writer.h"
#include "format/dcp/item_index.h"

namespace distckpt {

// "__<rank>_<index>.distcp".
std::string DcpDataFileName(int rank, int index);
bool IsDcpDataFileName(std::string_view name);

// How a chunk's storage record of `bytes` bytes is saved and indexed: the
// shape it is saved with (a flat chunk as (1, ..., 1, n)) and its item-index
// tiles (format/block_layout.h) of at most block_size bytes a piece. What
// DcpWriter writes, and what `distckpt index` indexes a record torch wrote by.
struct DcpRecordLayout {
  Shape shape;
  uint32_t block_size;
  BlockLayout tiles;
};
DcpRecordLayout DcpLayoutOf(const StoredTensor& tensor, const StoredChunk& chunk, uint64_t bytes);

class DcpWriter : public DataFileWriter {
 public:
  // Writes `__<rank>_<stream>.distcp` (one file per writer thread, as DCP's).
  DcpWriter(Env* env, std::string dir, int rank, int stream, std::string format_name);

 private:
  // A record's CRC32 and index hash, and its blocks' CRC32s (item_index.h),
  // hashed ahead.
  struct Hashed {
    DcpRecordSums sums;
    std::vector<uint32_t> blocks;
  };
  void StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                  std::span<const std::byte> bytes) override;
  // Runs of small chunks: helpers hash records ahead of their writes.
  void StoreChunks(std::span<PendingChunk> chunks) override;
  // `hashed`: the record's CRCs, computed ahead; else hashed while written.
  void StoreRecord(const StoredTensor& tensor, StoredChunk& chunk, std::span<const std::byte> bytes,
                   Hashed* hashed);
  void StoreObject(StoredObject& object, std::span<const std::byte> bytes) override;
  void FinishItems(uint64_t size) override;
  // TensorPickle of a record, made once per dtype and shape (up to
  // kMaxPickles of them; more are made each time).
  std::string_view Pickle(DType dtype, const Shape& shape, uint64_t bytes);

  static constexpr size_t kMaxPickles = 1024;
  DcpIndexWriter index_;
  std::map<std::pair<DType, Shape>, std::string> pickles_;
  std::string pickle_;  // the last one made past kMaxPickles
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_WRITER_H_
