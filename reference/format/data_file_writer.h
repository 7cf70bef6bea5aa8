// DataFileWriter: what every format's CheckpointWriter shares. It checks
// each chunk against its global shape, flat range and byte count, records
// tensors, chunks and objects in the rank's metadata (one dtype and global
// shape per key, one payload per object unique key), appends to one data
// file per (rank, stream) opened on first use, and fsyncs and closes it in
// Finish. A format says only how an item is stored: StoreChunk/StoreObject
// append it (through Append) and fill its offset, length and checksum.
// Small appends are held back and joined to the next larger write (one
// gathered system call), as are a format's AppendHeld bytes up to about
// 1 MiB; the file has every byte once Finish returns.
//
// Errors: a chunk outside its tensor, a flat range outside its box, or
// bytes that disagree with the elements are CheckpointError
// (kInvalidArgument); a key written with two dtypes or shapes is
// kShapeMismatch; writing after Finish is kInvalidArgument; I/O errors come
// from Env.
//
// Thread-safety: a writer belongs to one rank and is used by one thread.
#ifndef DISTCKPT_FORMAT_DATA_FILE_WRITER_H_
#define DISTCKPT_FORMAT_DATA_FILE_WRITER_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/format.h"

namespace distckpt {

// "__<rank>_<index><suffix>": every format's data file names (".bin", ".distcp").
std::string RankFileName(int rank, int index, std::string_view suffix);
// True exactly for the names RankFileName produces with `suffix`.
bool IsRankFileName(std::string_view name, std::string_view suffix);

class DataFileWriter : public CheckpointWriter {
 public:
  StoredChunk WriteTensorChunk(const std::string& key, DType dtype, const Shape& global_shape,
                               const Box& box, const std::optional<FlatRange>& flat,
                               std::span<const std::byte> bytes) final;
  void WriteTensorChunks(std::span<const ChunkToWrite> chunks) final;
  StoredObject WriteObject(const std::string& key, const std::string& unique_key,
                           const Shape& global_shape, const Shape& global_offset,
                           std::span<const std::byte> bytes) final;
  // fdatasyncs and closes the data file; the writer accepts nothing after.
  CheckpointMetadata Finish() final;
  uint64_t bytes_written() const final { return bytes_written_; }
  void SetHelpers(int helpers) final { helpers_ = helpers; }

 protected:
  // `metadata` carries the format's name and version; `file_name` is the
  // data file inside `dir`.
  DataFileWriter(Env* env, std::string dir, int rank, std::string file_name,
                 CheckpointMetadata metadata);

  // Appends one item's `chunk.length` element bytes (`bytes`) and sets
  // chunk.offset (and checksum, if the format keeps one).
  virtual void StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                          std::span<const std::byte> bytes) = 0;
  // A chunk checked and recorded, to be stored.
  struct PendingChunk {
    StoredTensor* tensor = nullptr;  // in the metadata (formats only read it)
    StoredChunk chunk;
    std::span<const std::byte> bytes;
  };
  // Stores the chunks in order, each as StoreChunk does; a format may
  // override it to work across chunks (the file must come out the same).
  virtual void StoreChunks(std::span<PendingChunk> chunks) {
    for (PendingChunk& c : chunks) StoreChunk(*c.tensor, c.chunk, c.bytes);
  }
  // Stores `chunks` in order: runs of at least two chunks smaller than
  // kHashOffloadMinBytes through `store_run` when the writer has helpers,
  // every other chunk through StoreChunk.
  void StoreInRuns(std::span<PendingChunk> chunks,
                   const std::function<void(std::span<PendingChunk>)>& store_run);
  // Appends the object's payload and sets object.offset and length (and checksum).
  virtual void StoreObject(StoredObject& object, std::span<const std::byte> bytes) = 0;
  // Called by Finish, before the data file is synced, when it holds items
  // ending at byte `size`: a format may append what follows its items.
  virtual void FinishItems(uint64_t size) {}

  // Appends payload bytes to the data file; returns the offset they start at.
  uint64_t Append(std::span<const std::byte> bytes);
  // Append of bytes the caller keeps unchanged until FlushHeld: they are not
  // copied but queued, and go out with the appends around them in gathered
  // writes of about kMaxHashedRunBytes (one system call for a run of small
  // items instead of one or two each).
  uint64_t AppendHeld(std::span<const std::byte> bytes);
  // Writes what is queued; bytes given to AppendHeld may change after.
  void FlushHeld() { Flush(); }
  // Overwrites bytes already appended, at `offset` of the data file (not
  // bytes still held: kInvalidArgument).
  void Overwrite(uint64_t offset, std::span<const std::byte> bytes);
  // Appends bytes of the format's own (checksums), not counted in
  // bytes_written; held as AppendHeld holds them when `held`.
  void AppendChecksums(std::span<const std::byte> bytes, bool held = false);
  int rank() const { return rank_; }
  // Helper-pool threads the format may borrow for hashing (SetHelpers).
  int helpers() const { return helpers_; }

 private:
  // Appends smaller than this wait in `pending_` (up to kPendingBytes) and go
  // out with the next larger write, in one gathered write: a DCP item's zip
  // headers and pickles, a native chunk's checksums, small objects.
  static constexpr size_t kJoinedAppendBytes = 4096;
  static constexpr size_t kPendingBytes = 64 << 10;

  // Bytes held (AppendHeld), queued after pending_[0, pending_before).
  struct Held {
    size_t pending_before;
    std::span<const std::byte> bytes;
  };

  void CheckOpen() const;
  // The data file's size, queued bytes included (opens the file on first use).
  uint64_t Size();
  // Calls fn(part, pending_begin) for each queued part in file order: runs of
  // pending_ (pending_begin: where the run starts there) and held bytes
  // (pending_begin: npos).
  template <typename Fn>
  void ForEachQueued(Fn&& fn) const;
  // Writes the queued bytes, then `also` (when given), in gathered writes.
  void Flush(std::span<const std::byte> also = {});
  // Checks a chunk against its tensor (recording the tensor on first use).
  PendingChunk Prepare(const std::string& key, DType dtype, const Shape& global_shape,
                       const Box& box, const std::optional<FlatRange>& flat,
                       std::span<const std::byte> bytes);
  WritableFile& File();

  Env* const env_;
  const std::string dir_;
  const int rank_;
  const std::string file_name_;
  std::unique_ptr<WritableFile> file_;
  std::string pending_;     // appended, not yet written to file_
  std::vector<Held> held_;  // in file order, interleaved with pending_
  uint64_t held_bytes_ = 0;
  CheckpointMetadata metadata_;
  uint64_t bytes_written_ = 0;
  int helpers_ = 0;
  bool finished_ = false;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DATA_FILE_WRITER_H_
