// The item index: what distckpt appends to each .distcp data file it writes,
// after the file's last item (FORMAT.md, "Item index"). PyTorch reads only
// the byte ranges .metadata gives its items, so it never sees these bytes;
// distckpt's reader uses them instead of every item's zip headers:
//
//   block CRCs   per indexed tensor item with blocks: the CRC32 of each
//                `block_size` bytes of its storage record (the last block
//                shorter), u32 each
//   table        one 48-byte entry per tensor item, by item offset:
//                item_offset, data_offset, data_size, binding, crcs_offset
//                (u64 each), crc, block_size (u32 each)
//   trailer      40 bytes: items_end, table_offset, count, the xxHash3-64 of
//                the table (u64 each), magic "DCPINDX1"
//
// All integers little-endian, offsets from the start of the file. `binding`
// is ChunkBindingSeed (native/block_checksums.h) of the item's key, dtype
// and box, so an entry found through a damaged .metadata offset does not
// match; `crc` is the storage record's zip CRC32. A reader that checks
// block CRCs reads only the blocks a partial read touches.
//
// Errors: a trailer with the magic whose fields do not fit the file, or a
// table that fails its checksum, is CheckpointError(kCorruption) naming
// `source`.
//
// Thread-safety: DcpIndexWriter belongs to one writer thread; the rest are
// pure functions.
#ifndef DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_
#define DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace distckpt {

struct DcpIndexEntry {
  uint64_t item_offset = 0;
  uint64_t data_offset = 0;  // the storage record's first byte
  uint64_t data_size = 0;
  uint64_t binding = 0;
  uint64_t crcs_offset = 0;  // the block CRCs (block_size > 0)
  uint32_t crc = 0;
  uint32_t block_size = 0;  // 0: none (the record is one block)
  friend bool operator==(const DcpIndexEntry&, const DcpIndexEntry&) = default;
};

inline constexpr uint64_t kDcpIndexTrailerBytes = 40;

// The block size for a record whose rows (last dimension) take `row_bytes`:
// 4 KiB, or a power of two down to 1 KiB so a row holds up to 8 blocks (a
// column split of a row reads blocks no larger than it needs); the block
// CRCs take at most 0.4% of the record. Records of one block get none.
uint32_t DcpBlockSize(uint64_t row_bytes);
// The CRC32 of each `block_size` bytes of `data` into `blocks` (none when
// block_size is 0); returns the CRC32 of all of `data`, combined from the
// blocks'. One pass: `each_piece`, when given, gets the data in order, in
// pieces of 256 KiB, each right after it was hashed (still in the cache).
// With `helpers` > 0, a record of blocks as large as kHashOffloadMinBytes
// (format/hashed_writes.h) is hashed by helper-pool threads while
// `each_piece` gets the pieces in order on this thread, in runs of those
// already hashed: the same CRCs.
uint32_t DcpBlockCrcs(std::span<const std::byte> data, uint32_t block_size,
                      std::vector<uint32_t>* blocks,
                      const std::function<void(std::span<const std::byte>)>& each_piece = nullptr,
                      int helpers = 0);

// The CRC32 of a record of `data_size` bytes from its blocks' CRC32s.
uint32_t CombineBlockCrcs(const std::vector<uint32_t>& blocks, uint32_t block_size,
                          uint64_t data_size);

class DcpIndexWriter {
 public:
  void Add(const DcpIndexEntry& entry, std::vector<uint32_t> block_crcs);
  bool empty() const { return entries_.empty(); }
  // The index to append at byte `items_end` of the file (its end): block
  // CRCs, table and trailer.
  std::string Finish(uint64_t items_end);

 private:
  std::vector<DcpIndexEntry> entries_;
  std::vector<std::vector<uint32_t>> block_crcs_;
};

struct DcpIndexTrailer {
  uint64_t items_end = 0;
  uint64_t table_offset = 0;
  uint64_t count = 0;
  uint64_t checksum = 0;
};

// The trailer in the last kDcpIndexTrailerBytes of a file of `file_size`
// bytes; nullopt when they do not end with the magic (no index: a file
// PyTorch or an older distckpt wrote).
std::optional<DcpIndexTrailer> ParseDcpIndexTrailer(std::span<const std::byte> last,
                                                    uint64_t file_size, const std::string& source);
// The entries of the table `bytes` (at trailer.table_offset), checked
// against the trailer's checksum and sorted by item offset.
std::vector<DcpIndexEntry> ParseDcpIndexTable(std::span<const std::byte> bytes,
                                              const DcpIndexTrailer& trailer,
                                              const std::string& source);
// Block CRCs as stored (`bytes`: 4 per block).
std::vector<uint32_t> ParseDcpBlockCrcs(std::span<const std::byte> bytes);
// ceil(data_size / block_size).
uint64_t DcpBlockCount(const DcpIndexEntry& entry);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_
