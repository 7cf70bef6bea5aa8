// The item index: what distckpt appends to each .distcp data file it writes,
// after the file's last item (FORMAT.md, "Item index"). PyTorch reads only
// the byte ranges .metadata gives its items, so it never sees these bytes;
// distckpt's reader uses them instead of every item's zip headers. Version 5
// ("DCPINDX5", since 2026-11-28; version 4, "DCPINDX4", has the same bytes
// but cuts a flat item's record into uniform blocks):
//
//   block CRCs   per indexed tensor item with blocks, by item offset: the
//                CRC32 of each tile (block) of its storage record, u32 each
//   groups       the entries of the tensor items by item offset, 16 to a
//                group, each entry: item offset - the previous entry's (the
//                group's first: 0), data offset - item offset, data size
//                (LEB128 varints), binding, hash (u64), crc (u32), block
//                size, tiles (varints); about 30 bytes an entry
//   directory    one 32-byte entry per group: its first item's offset, its
//                first byte, its first block CRC's offset, the xxHash3-64 of
//                its bytes (u64 each)
//   trailer      40 bytes: items_end, table_offset (the first group's byte),
//                count (entries), the xxHash3-64 of the directory (u64
//                each), magic "DCPINDX5"
//
// A reader checks the directory against the trailer and each group it reads
// against the directory: it reads only the groups of the items it needs (a
// second level of checksums, so a rank of a resharded load reads the
// entries of its items, not the whole table). An item's block CRCs follow
// the CRCs of the entries before it (crcs_offset is their running sum).
//
// Versions 1 to 3 have one table of fixed-size entries, by item offset,
// whose xxHash3-64 the trailer holds: 64 bytes (version 3, "DCPINDX3":
// item_offset, data_offset, data_size, binding, crcs_offset, hash (u64
// each), crc, block_size (u32 each), tiles (u64)); 56 without `tiles`
// (version 2, "DCPINDX2": uniform blocks); 48 without `hash` either
// (version 1, "DCPINDX1", distckpt before 2026-11-27: records verified by
// CRC32). They are still read, and written on request (tests).
//
// All integers little-endian, offsets from the start of the file. `binding`
// is ChunkBindingSeed (format/block_checksums.h) of the item's key, dtype
// and box, so an entry found through a damaged .metadata offset does not
// match; `crc` is the storage record's zip CRC32; `hash` the record's
// DcpRecordHasher digest (xxHash3, which a whole read verifies at 2.5 times
// CRC32's speed). A reader that checks block CRCs reads only the blocks a
// partial read touches. Since version 3 a record's blocks are tiles laid
// along the cuts a reshard makes (the native format's version 4,
// format/block_layout.h; `tiles` of them, each CRC32 of its parts in
// order), so a resharded read reads only the tiles it needs; the tile CRCs
// do not combine into the record's CRC32. Since version 5 a flat item's
// (distributed-optimizer state) tiles are the rows of its box too (native
// version 5); versions 3 and 4 cut it into uniform blocks. Version 2 has
// uniform blocks.
//
// Errors: a trailer with the magic whose fields do not fit the file, or a
// table that fails its checksum, is CheckpointError(kCorruption) naming
// `source`.
//
// Thread-safety: DcpIndexWriter belongs to one writer thread; the rest are
// pure functions.
#ifndef DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_
#define DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "format/block_layout.h"
#include "io/checksum.h"
#include "io/env.h"

namespace distckpt {

struct DcpIndexEntry {
  uint64_t item_offset = 0;
  uint64_t data_offset = 0;  // the storage record's first byte
  uint64_t data_size = 0;
  uint64_t binding = 0;
  uint64_t crcs_offset = 0;      // the block CRCs (block_size > 0)
  std::optional<uint64_t> hash;  // DcpRecordHasher's digest; none in version 1
  uint32_t crc = 0;
  uint32_t block_size = 0;  // 0: none (the record is one block)
  // Version 3: the record's blocks are this many tiles (format/block_layout.h,
  // of the item's box, at most block_size bytes a piece); 0: uniform blocks.
  uint64_t tiles = 0;
  // Version 5: a flat item's tiles are its box's rows
  // (BlockLayout::Flat::kRows); earlier versions cut it as uniform blocks.
  // Not stored: the trailer's version says.
  bool flat_rows = false;
  friend bool operator==(const DcpIndexEntry&, const DcpIndexEntry&) = default;
};

inline constexpr uint64_t kDcpIndexTrailerBytes = 40;

// The block size for a record whose rows (last dimension) take `row_bytes`:
// 4 KiB, or a power of two down to 1 KiB so a row holds up to 8 blocks (a
// column split of a row reads blocks no larger than it needs); the block
// CRCs take at most 0.4% of the record. Records of one block get none.
uint32_t DcpBlockSize(uint64_t row_bytes);
// A record's `hash`: the xxHash3 of each 64 KiB of it bound to `binding` and
// its index (native's BlockChecksum), combined as native's SumsChecksum.
// Update takes the record in order, in pieces of any size.
class DcpRecordHasher {
 public:
  static constexpr uint64_t kBlockBytes = 64 << 10;
  explicit DcpRecordHasher(uint64_t binding) : binding_(binding) {}
  void Update(std::span<const std::byte> piece);
  uint64_t Digest() const;

 private:
  uint64_t binding_;
  std::vector<uint64_t> sums_;          // of the whole blocks so far
  std::optional<Checksummer> partial_;  // the block begun, streamed
  uint64_t in_block_ = 0;               // its bytes so far
};

// The checks of a record: its zip CRC32 and its index hash.
struct DcpRecordSums {
  uint32_t crc = 0;
  uint64_t hash = 0;
};

// The CRC32 of each `block_size` bytes of `data` into `blocks` (none when
// block_size is 0), the CRC32 of all of `data` combined from the blocks',
// and its DcpRecordHasher digest under `binding`. One pass: `each_piece`,
// when given, gets the data in order, in pieces of 256 KiB, each right
// after it was hashed (still in the cache). With `helpers` > 0, a record of
// blocks as large as kHashOffloadMinBytes (format/hashed_writes.h) is hashed
// by helper-pool threads while `each_piece` gets the pieces in order on this
// thread, in runs of those already hashed: the same sums.
DcpRecordSums DcpHashRecord(
    std::span<const std::byte> data, uint32_t block_size, uint64_t binding,
    std::vector<uint32_t>* blocks,
    const std::function<void(std::span<const std::byte>)>& each_piece = nullptr, int helpers = 0);
// DcpHashRecord's CRC32 alone.
inline uint32_t DcpBlockCrcs(
    std::span<const std::byte> data, uint32_t block_size, std::vector<uint32_t>* blocks,
    const std::function<void(std::span<const std::byte>)>& each_piece = nullptr, int helpers = 0) {
  return DcpHashRecord(data, block_size, 0, blocks, each_piece, helpers).crc;
}

// Version 3: the CRC32 of each tile of `layout` (its parts in order) of the
// record `data`.
std::vector<uint32_t> DcpTileCrcs(const BlockLayout& layout, std::span<const std::byte> data);

// The CRC32 of a record of `data_size` bytes from its blocks' CRC32s.
uint32_t CombineBlockCrcs(const std::vector<uint32_t>& blocks, uint32_t block_size,
                          uint64_t data_size);

inline constexpr int kDcpIndexVersion = 5;
inline constexpr uint64_t kDcpIndexGroupEntries = 16;  // version 4
inline constexpr uint64_t kDcpIndexDirectoryEntryBytes = 32;

class DcpIndexWriter {
 public:
  void Add(const DcpIndexEntry& entry, std::vector<uint32_t> block_crcs);
  bool empty() const { return entries_.empty(); }
  // The index to append at byte `items_end` of the file (its end): block
  // CRCs, table and trailer, of `version` (3 or 4: older layouts for tests;
  // a version-3 table keeps entries with tiles, as distckpt wrote them;
  // version 4 is version 5's layout, its flat items' CRCs of uniform blocks).
  std::string Finish(uint64_t items_end, int version = kDcpIndexVersion);

 private:
  std::vector<DcpIndexEntry> entries_;
  std::vector<std::vector<uint32_t>> block_crcs_;
};

struct DcpIndexTrailer {
  uint64_t items_end = 0;
  uint64_t table_offset = 0;
  uint64_t count = 0;
  uint64_t checksum = 0;
  int version = kDcpIndexVersion;  // 1: entries without `hash`; 2: without `tiles`
  // Versions 4 and 5: the groups (table_offset to directory_offset) and directory.
  uint64_t groups = 0;
  uint64_t directory_offset = 0;
};

// Version 4: a group of entries as the directory lists it: entries
// [first_entry, first_entry + entries) of the file, at bytes [begin, end).
struct DcpIndexGroup {
  uint64_t first_item = 0;  // the item offset of its first entry
  uint64_t begin = 0, end = 0;
  uint64_t crcs_offset = 0;
  uint64_t hash = 0;
  uint64_t first_entry = 0, entries = 0;
};

// The trailer in the last kDcpIndexTrailerBytes of a file of `file_size`
// bytes; nullopt when they do not end with the magic (no index: a file
// PyTorch or an older distckpt wrote).
std::optional<DcpIndexTrailer> ParseDcpIndexTrailer(std::span<const std::byte> last,
                                                    uint64_t file_size, const std::string& source);
// The entries of the table `bytes` (from trailer.table_offset to the
// trailer, of the trailer's version: version 4's groups and directory),
// checked against the trailer's checksum and sorted by item offset.
std::vector<DcpIndexEntry> ParseDcpIndexTable(std::span<const std::byte> bytes,
                                              const DcpIndexTrailer& trailer,
                                              const std::string& source);
// Version 4: the directory `bytes` (at trailer.directory_offset, to the
// trailer), checked against the trailer's checksum.
std::vector<DcpIndexGroup> ParseDcpIndexDirectory(std::span<const std::byte> bytes,
                                                  const DcpIndexTrailer& trailer,
                                                  const std::string& source);
// Version 4: the entries of `group` from its bytes, checked against the
// directory's hash of them.
std::vector<DcpIndexEntry> ParseDcpIndexGroup(std::span<const std::byte> bytes,
                                              const DcpIndexGroup& group,
                                              const DcpIndexTrailer& trailer,
                                              const std::string& source);
// Reads bytes [offset, offset + dst.size()) of an index's data file (and
// counts them: DcpReader reads some from what another rank sent it instead).
using DcpIndexRead = std::function<void(uint64_t offset, std::span<std::byte> dst)>;
// A DcpIndexRead of `file` that adds what it reads to `*bytes_read`.
DcpIndexRead DcpReadFrom(const RandomAccessFile& file, std::atomic<uint64_t>* bytes_read);

// A data file's item index as a reader uses it: versions 1 to 3 whole (the
// table read at once), version 4 by group, each group read (and checked) on
// first use of one of its items, so a reader reads the entries of the items
// it reads. Shared by the readers open at once (DcpReader).
//
// Thread-safety: Find and Prefetch may be called concurrently.
class DcpFileIndex {
 public:
  // The bytes [first, second) of a file of `file_size` bytes that the
  // constructor reads after the trailer: the table (versions 1 to 3) or the
  // directory (version 4).
  static std::pair<uint64_t, uint64_t> HeadBytes(const DcpIndexTrailer& trailer,
                                                 uint64_t file_size);
  // Reads HeadBytes of the file through `read` and parses them; errors name
  // `source`.
  DcpFileIndex(const DcpIndexTrailer& trailer, uint64_t file_size, std::string source,
               const DcpIndexRead& read);
  // The entry of the item at `item_offset`, null when the index lists none;
  // its group is read first (version 4). The entry lives as long as this
  // index.
  const DcpIndexEntry* Find(uint64_t item_offset, const DcpIndexRead& read);
  // Reads the groups holding any of `item_offsets` (sorted) not read yet,
  // adjacent groups in one read.
  void Prefetch(std::span<const uint64_t> item_offsets, const DcpIndexRead& read);
  // Version 4: the groups (ascending, once each) holding any of
  // `item_offsets`, read or not; none for versions 1 to 3.
  std::vector<uint64_t> GroupsOf(std::span<const uint64_t> item_offsets) const;
  // The bytes [first, second) of each run of adjacent groups among `groups`
  // (ascending; any past the directory's left out), as Prefetch would read
  // them.
  std::vector<std::pair<uint64_t, uint64_t>> GroupRuns(std::span<const uint64_t> groups) const;
  int version() const { return trailer_.version; }

 private:
  // Group g's entries in entries_; mu_ held.
  void LoadGroups(uint64_t first, uint64_t last, const DcpIndexRead& read);
  uint64_t GroupOf(uint64_t item_offset) const;  // groups_.size() when none

  const DcpIndexTrailer trailer_;
  const std::string source_;
  std::vector<DcpIndexGroup> groups_;  // version 4
  std::mutex mu_;
  std::vector<bool> loaded_;                   // guarded by mu_
  std::map<uint64_t, DcpIndexEntry> entries_;  // by item offset; guarded by mu_
};

// Block CRCs as stored (`bytes`: 4 per block).
std::vector<uint32_t> ParseDcpBlockCrcs(std::span<const std::byte> bytes);
// The entry's block CRCs: its tiles, or ceil(data_size / block_size).
uint64_t DcpBlockCount(const DcpIndexEntry& entry);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_ITEM_INDEX_H_
