// NativeReader: reads a committed native checkpoint (FORMAT.md). Data files
// are opened on first use and kept open. Version 2 and 3 chunks (per-block
// checksums): ReadChunk reads every block the runs touch, whole, and verifies
// each before handing any of its bytes out (kAlways: every block of the
// chunk; kNever: exactly the runs, unverified); version 3 first reads the
// chunk's block checksums from after its payload and checks them against
// their checksum in metadata.json. Version 1 chunks: exactly the requested
// byte runs (runs adjacent both in the file and in memory become one read),
// the chunk's checksum verified when they cover it whole.
//
// ReadStats: bytes_read counts payload bytes requested from data files,
// checksum_bytes_read the version 3 block checksums; a chunk read without
// verification (v1 partial runs, kNever, no checksum) counts as unverified.
// Objects add to bytes_read only.
//
// Errors: a data file that is missing or shorter than an item's byte range
// (version 3: its block checksums included), or a checksum mismatch (of a
// block, or of a chunk's block checksums), is CheckpointError(kCorruption)
// naming the file, the key and the rank that wrote it; malformed read runs
// are kInvalidArgument.
//
// Thread-safety: ReadChunk, ReadObject and stats() may be called
// concurrently.
#ifndef DISTCKPT_FORMAT_NATIVE_NATIVE_READER_H_
#define DISTCKPT_FORMAT_NATIVE_NATIVE_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "format/chunk_layouts.h"
#include "format/data_files.h"
#include "format/format.h"

namespace distckpt {

class NativeReader : public CheckpointReader {
 public:
  // `metadata` may be shared with other readers (format/metadata_cache.h),
  // and so may `layouts`, its chunks' block layouts (null: the reader's own).
  NativeReader(Env* env, std::string dir, std::shared_ptr<const CheckpointMetadata> metadata,
               std::shared_ptr<ChunkLayouts> layouts = nullptr);

  const CheckpointMetadata& metadata() const override { return *metadata_; }
  // kAlways on a partial read reads the whole chunk once, verifies it and
  // copies the runs out of it (bytes_read counts the whole chunk).
  void ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                 std::span<const ReadRun> runs, VerifyPolicy policy) override;
  // Small verified chunks read whole, lying back to back in one file: one
  // preadv for several (payload and block checksums of each).
  void ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy) override;
  // Versions 2 and 3 (kWhenWhole) and kNever: pieces of whole blocks, read
  // and verified one at a time into one buffer of about `piece_bytes`;
  // version 1 and kAlways: the default (every range at once).
  void StreamChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                   std::span<const ReadRun> ranges, VerifyPolicy policy, uint64_t piece_bytes,
                   const ConsumeBytes& consume) override;
  std::string ReadObject(const StoredObject& object) override;
  const ReadStats& stats() const override { return stats_; }
  void CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) override;

 private:
  std::span<const uint64_t> BlockSums(const RandomAccessFile& file, const StoredChunk& chunk,
                                      uint64_t seed, const DataFiles::Describe& what,
                                      std::vector<uint64_t>& storage);
  // `reads`: small verified chunks read whole, back to back in `file`
  // (checked to hold them): one ReadGathered, then each chunk's checks.
  void ReadWholeWithSums(const RandomAccessFile& file, std::span<const ChunkRead> reads);
  // StreamChunk of a verified version 4 chunk (tiles): pieces of whole units.
  void StreamTiles(const RandomAccessFile& file, const StoredTensor& tensor,
                   const StoredChunk& chunk, std::span<const ReadRun> ranges,
                   std::span<const uint64_t> sums, uint64_t seed, uint64_t piece_bytes,
                   const ConsumeBytes& consume, const DataFiles::Describe& what);

  // ChunkLayout(tensor, chunk) and the chunk's binding seed, kept in
  // layouts_ (`storage` otherwise).
  const ChunkLayouts::Chunk& Layout(const StoredTensor& tensor, const StoredChunk& chunk,
                                    ChunkLayouts::Chunk& storage);

  const std::shared_ptr<const CheckpointMetadata> metadata_;
  const std::shared_ptr<ChunkLayouts> layouts_;
  DataFiles files_;
  ReadStats stats_;
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_NATIVE_READER_H_
