// DcpReader: reads a committed DCP checkpoint through its DcpLayout
// (dcp_layout.h). A tensor item is opened on first use and its storage
// record (data offset, size, CRC32, and the tensor's size, stride and storage
// offset) cached:
//
// - from the data file's item index (item_index.h) when distckpt wrote the
//   checkpoint: the file's trailer, then (version 4) its group directory
//   and the groups of 16 entries that hold the items read (about 30 bytes
//   an entry), each read once, or (versions 1 to 3) the whole table, 48 to
//   64 bytes an entry; shared by the readers open at the same time, e.g.
//   the ranks of one load, of a local file of the same path, size,
//   modification time and trailer; and read once between a load's ranks in
//   any process (PrepareReads: one reads each piece, sends it, the others
//   check it). No zip header is read;
// - from an external item index ("sidecar", sidecar_index.h) that
//   `distckpt index` wrote for a data file without its own index (torch
//   wrote it): `<file>.dcpindex` beside it, else one in the cache directory
//   (DcpIndexCacheDir), shared like an in-file index (between the readers
//   of a process, and a load's ranks: PrepareReads). Its trailer must give
//   the file's size, and before a
//   partial read through an entry the record's zip data descriptor (or local
//   header) must record the entry's CRC32 and size; a sidecar that fails
//   that, its own checks, or a check of the data it verifies is not used for
//   the file or item: the record is read whole and checked against its zip
//   CRC32 (which refuses damaged data), with one warning naming the sidecar;
// - else from the item's zip headers: a head (data.pkl, the storage record's
//   local header) and a tail (zip directory) sized by what the file's first
//   item needed; an item of at most 4 KiB is read whole, once, and kept.
//
// Then, for a contiguous record, exactly the requested byte runs are read
// (like the native format); a non-contiguous one (a transposed view keeps
// its strides) is read whole and gathered. ReadChunks reads whole records of
// up to 256 KiB lying near one another in one gathered read (the zip headers
// between them into scratch, counted in bytes_read, while they stay within
// 1/64 of the records' bytes). Verification (VerifyPolicy): runs
// that cover the whole record are hashed as they are read (the record hash
// of a version 2 index, item_index.h; else, and with kAlways, the zip's
// CRC32);
// a partial read of an indexed item reads and checks the blocks it touches
// (block CRC32s of the index, 1-4 KiB); a partial read of any other item
// reads the record whole to check its one CRC32; kAlways reads every touched
// record whole, and for an indexed item also checks its zip headers agree
// with the index; kNever reads exactly the runs.
//
// ReadStats: bytes_read counts every byte read from data files (indexes,
// block CRCs, zip headers, whole small items, whole records read to verify
// them), so it exceeds the bytes needed by that overhead. The
// constructor also assembles the common state: common.pt (Megatron),
// else a "common_state" ShardedObject (Megatron HEAD), plus every bytes item
// that is not a ShardedObject, at its planner_data path.
//
// Errors: a missing or truncated data file or item, a damaged archive or
// item index, a CRC mismatch, or an item that disagrees with .metadata is
// CheckpointError (kCorruption) naming the file and the key; items written
// with stream transforms (zstd, ...) are kUnsupported.
//
// Thread-safety: ReadChunk, ReadObject and stats() may be called concurrently.
#ifndef DISTCKPT_FORMAT_DCP_DCP_READER_H_
#define DISTCKPT_FORMAT_DCP_DCP_READER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "format/data_files.h"
#include "format/dcp/dcp_layout.h"
#include "format/dcp/item_index.h"
#include "format/dcp/torch_save.h"
#include "format/format.h"

namespace distckpt {

class DcpReader : public CheckpointReader {
 public:
  // `layout` is shared (a cached parse of .metadata); the reader's metadata
  // is it with the common state read from the checkpoint.
  DcpReader(Env* env, std::string dir, std::shared_ptr<const DcpLayout> layout);

  const CheckpointMetadata& metadata() const override { return *metadata_; }
  void ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                 std::span<const ReadRun> runs, VerifyPolicy policy) override;
  // Whole small records lying near one another in a file share one preadv.
  void ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy) override;
  std::string ReadObject(const StoredObject& object) override;
  // The item (torch.save of the list [value], Megatron's form; the record
  // keeps any other elements), read whole, every zip record's CRC32 checked.
  std::shared_ptr<const ObjectRecord> ReadObjectRecord(const StoredObject& object) override;
  std::shared_ptr<const ObjectRecord> CommonRecord() const override { return common_record_; }
  const ReadStats& stats() const override { return stats_; }
  void CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) override;
  // The item indexes of the files the ranks read (distckpt wrote them), each
  // piece read once by one rank: in round 1 a rank that reads a file (its
  // owner) reads its trailer and directory (version 4; table: versions 1
  // to 3), in round 2 the union of the groups of entries the ranks need,
  // adjacent groups in one read; each round's pieces are all-gathered (two
  // AllGathers a round). A rank uses a received piece in place of reading
  // those bytes, checking it as read (the trailer's hash of the directory,
  // the directory's of each group), and counts only what it read. For a
  // file torch wrote, the pieces are of its sidecar (read by the owner from
  // its own; a rank uses them only where it has a sidecar of that file, whose
  // trailer's hash must match what it receives).
  void PrepareReads(const ChunksFn& chunks, Communicator& comm) override;

  // For `distckpt index`: the item index of data file `file` (as .metadata
  // names it), read and verified as a full verified load does (every tensor
  // item whole: its zip headers and data.pkl agree with .metadata, its
  // storage record's CRC32), as DcpIndexWriter::Finish(the file's size)
  // encodes it; empty when the file holds no tensor item an index can list
  // (a strided or offset view is left to its zip headers). `*items` gets the
  // entries' count. A bad record is CheckpointError(kCorruption) naming the
  // file and key.
  std::string BuildItemIndex(const std::string& file, uint64_t* items = nullptr);

 private:
  struct TensorItem {
    TorchTensor tensor;
    uint64_t record_offset = 0;  // of the storage record's data, in the data file
    uint64_t record_size = 0;
    uint32_t crc = 0;
    // A small item, whole (the record's data at record_offset - item offset).
    std::shared_ptr<const std::string> bytes;
    // Its entry in the file's item index (distckpt wrote it), else null.
    const DcpIndexEntry* index = nullptr;
    bool sidecar = false;  // `index` is a sidecar's entry
  };
  // A data file's sidecar (sidecar_index.h), once opened.
  struct Sidecar {
    std::unique_ptr<RandomAccessFile> file;
    uint64_t base = 0;  // the data file's size: index byte `at` is sidecar byte `at - base`
    bool bad = false;   // failed a check of its own: not used any more; guarded by mu_
    std::map<uint64_t, std::string> head;  // its trailer and directory as read (PrepareReads)
  };
  // Index bytes a rank sent (PrepareReads), copied into `dst`; false when none cover them.
  bool FromReceived(const std::string& file, uint64_t offset, std::span<std::byte> dst);
  // `file`'s sidecar, in use or found bad (its bytes are the index's), else null.
  Sidecar* AnySidecar(const std::string& file);
  // Index bytes [offset, + dst.size()) of data file `f` from its sidecar, counted.
  void ReadSidecar(Sidecar& sidecar, const RandomAccessFile& f, uint64_t offset,
                   std::span<std::byte> dst);
  // One ReadChunk of `item` (its zip's, an index's or a sidecar's view).
  void ReadItem(const TensorItem& item, const StoredTensor& tensor, const StoredChunk& chunk,
                std::span<const ReadRun> runs, VerifyPolicy policy,
                const std::function<std::string()>& what, uint64_t covered);
  // The sidecar of `file`, null when it has none in use.
  Sidecar* SidecarOf(const std::string& file);
  using FileIndex = DcpFileIndex;

  // The torch.save archive of the item at (file, offset), read through a
  // cache; a small item, or any with `read_whole`, is read whole into
  // `*whole` when given.
  ZipReader OpenItem(const std::string& file, uint64_t offset, uint64_t length,
                     const std::function<std::string()>& what,
                     std::shared_ptr<const std::string>* whole = nullptr, bool read_whole = false);
  // The item, from the file's item index when it has one, else from its
  // zip headers; cached. Once the file's index is read, one lock of mu_.
  const TensorItem& Item(const StoredTensor& tensor, const StoredChunk& chunk,
                         const std::function<std::string()>& what);
  // The item as its index entry `e` describes it, checked against .metadata
  // (`item_length`: the item's bytes there).
  TensorItem IndexedItem(const StoredTensor& tensor, const StoredChunk& chunk,
                         const DcpIndexEntry& e, uint64_t item_length,
                         const std::function<std::string()>& what) const;
  // The item of `read` when ReadChunks may read it with others: a whole
  // contiguous record of at most 256 KiB (hashed once read, still in
  // the cache), read into one destination, not held
  // in memory; else null (also when its item cannot be opened: ReadChunk
  // then reports that in turn).
  const TensorItem* GatheredItem(const ChunkRead& read);
  // The item from its zip headers and data.pkl (not cached).
  TensorItem ZipItem(const StoredTensor& tensor, const StoredChunk& chunk,
                     const std::function<std::string()>& what);
  // The index entry of the item at `item_offset` of `file`: null when the
  // file has no index (written by torch or an older distckpt) or it does not
  // list the item. A file's index is read once, on first use.
  const DcpIndexEntry* IndexEntry(const std::string& file, uint64_t item_offset,
                                  const std::function<std::string()>& what);
  // The file's index (opened once: its trailer, and the table or directory),
  // null when it has none.
  std::shared_ptr<FileIndex> FileIndexOf(const std::string& file,
                                         const std::function<std::string()>& what);
  // The sidecar index of `file` (`f`), null when none is found or usable
  // (then warns once naming it).
  std::shared_ptr<FileIndex> SidecarIndexOf(const std::string& file, const RandomAccessFile& f);
  // Prints, once per sidecar and process, that `file`'s sidecar is not used (`why`).
  void WarnSidecar(const std::string& file, const std::string& why);
  // The item read through its zip headers instead of its sidecar entry
  // (`why`: warned once): cached apart, so references to the first stay valid.
  const TensorItem& WithoutSidecar(const StoredTensor& tensor, const StoredChunk& chunk,
                                   const std::function<std::string()>& what,
                                   const std::string& why);
  // Whether a sidecar item's record still lies as its entry says (checked
  // once per item; warns and returns false when not).
  bool SidecarBound(const TensorItem& item, const StoredChunk& chunk,
                    const std::function<std::string()>& what);
  // Whether a reader follows `trailer` of `file`: an index lists non-empty
  // tensor items, which .metadata lists too; a trailer counting more
  // (damaged) is not followed (reading what it claims could mean the whole
  // file): the zip headers serve instead.
  bool FollowsTrailer(const std::string& file, const DcpIndexTrailer& trailer) const;
  // Bytes [offset, offset + dst.size()) of `file`'s item index: a piece
  // another rank read and sent (PrepareReads), else read from `f` and
  // counted.
  void ReadIndexBytes(const std::string& file, const RandomAccessFile& f, uint64_t offset,
                      std::span<std::byte> dst);
  DcpIndexRead IndexRead(const std::string& file, const RandomAccessFile& f);
  // What FileIndexOf reads of `file`, read from it and counted (its
  // trailer, then the table or directory a reader follows), by offset;
  // the pieces before the first that fails to read or parse.
  std::map<uint64_t, std::string> ReadIndexHead(const std::string& file);
  // The version-4 index groups of the items `reads` read, adjacent groups
  // of a file in one read.
  void PrefetchIndexes(std::span<const ChunkRead> reads);
  // One ReadChunk call: its storage record and read paths, one function each
  // (dcp_reader.cc).
  class RecordRead;
  // The block CRC32s of an indexed item, read once.
  // (From `name`'s sidecar when it has one in use.)
  const std::vector<uint32_t>& BlockCrcs(const DcpIndexEntry& entry, const std::string& name,
                                         const RandomAccessFile& file);
  nlohmann::json ReadValue(const std::string& file, uint64_t offset, uint64_t length,
                           const std::string& what);
  // The common state; `from_object` is set when it was the common_state
  // ShardedObject (Megatron HEAD).
  nlohmann::json ReadCommonState(bool& from_object);

  Env* const env_;
  const std::string dir_;
  const std::shared_ptr<const DcpLayout> layout_;
  std::shared_ptr<const CheckpointMetadata> metadata_;  // set by the constructor
  DataFiles files_;
  std::shared_ptr<const ObjectRecord> common_record_;  // set by ReadCommonState
  std::mutex mu_;
  std::map<DcpItemKey, TensorItem> tensor_items_;  // guarded by mu_
  // Per data file, the head and tail of its tensor items: learnt from the
  // first one opened (a writer lays out every tensor item alike). Before
  // that, 512 bytes each: torch 2.6's items need 372 bytes of head (data.pkl,
  // the storage record's local header) and 420 of tail (five directory
  // entries, zip64 end records); distckpt's 356 and 268.
  struct Edges {
    uint64_t head = 512;
    uint64_t tail = 512;
  };
  std::map<std::string, Edges> edges_;                         // guarded by mu_
  std::map<std::string, std::shared_ptr<FileIndex>> indexes_;  // guarded by mu_
  std::map<std::string, std::unique_ptr<Sidecar>> sidecars_;   // guarded by mu_
  std::map<DcpItemKey, TensorItem> zip_items_;  // read without their sidecar; guarded by mu_
  std::set<DcpItemKey> bound_;                  // sidecar items checked bound; guarded by mu_
  // Item index pieces other ranks read (PrepareReads): by file, by offset.
  std::map<std::string, std::map<uint64_t, std::string>> received_;  // guarded by mu_
  std::map<const DcpIndexEntry*, std::unique_ptr<const std::vector<uint32_t>>>
      block_crcs_;  // guarded by mu_
  ReadStats stats_;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_READER_H_
