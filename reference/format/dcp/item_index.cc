#include "format/dcp/item_index.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"
#include "core/little_endian.h"
#include "format/block_checksums.h"
#include "format/dcp/torch_zip.h"
#include "format/hashed_writes.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

constexpr char kMagicV1[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '1'};
constexpr char kMagicV2[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '2'};
constexpr char kMagic[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '3'};
constexpr uint64_t EntryBytes(int version) { return version == 1 ? 48 : version == 2 ? 56 : 64; }
constexpr uint32_t kMaxBlock = 4 << 10;
constexpr uint32_t kMinBlock = 1 << 10;
constexpr size_t kPieceBytes = 256 << 10;  // a multiple of every block size

void Put(std::string& out, uint64_t value, int bytes) { AppendLittleEndian(out, value, bytes); }

uint64_t Get(const std::byte* p, int bytes) { return LoadLittleEndian(p, bytes); }

}  // namespace

uint32_t DcpBlockSize(uint64_t row_bytes) {
  return static_cast<uint32_t>(std::clamp<uint64_t>(
      std::bit_floor(std::max<uint64_t>(row_bytes / 8, 1)), kMinBlock, kMaxBlock));
}

uint64_t DcpBlockCount(const DcpIndexEntry& entry) {
  if (entry.tiles != 0) return entry.tiles;
  return entry.block_size == 0 ? 0 : (entry.data_size + entry.block_size - 1) / entry.block_size;
}

void DcpRecordHasher::Update(std::span<const std::byte> piece) {
  while (!piece.empty()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockBytes - in_block_, piece.size()));
    if (in_block_ == 0 && n == kBlockBytes) {  // a whole block in one call: one shot
      sums_.push_back(BlockChecksum(piece.first(n), binding_, sums_.size()));
    } else {
      if (in_block_ == 0) partial_.emplace(BlockSeed(binding_, sums_.size()));
      partial_->Update(piece.first(n));
      in_block_ += n;
      if (in_block_ == kBlockBytes) {
        sums_.push_back(partial_->Digest());
        in_block_ = 0;
      }
    }
    piece = piece.subspan(n);
  }
}

uint64_t DcpRecordHasher::Digest() const {
  if (in_block_ == 0) return SumsChecksum(sums_, binding_);
  std::vector<uint64_t> sums = sums_;
  sums.push_back(partial_->Digest());
  return SumsChecksum(sums, binding_);
}

DcpRecordSums DcpHashRecord(std::span<const std::byte> data, uint32_t block_size, uint64_t binding,
                            std::vector<uint32_t>* blocks,
                            const std::function<void(std::span<const std::byte>)>& each_piece,
                            int helpers) {
  blocks->clear();
  if (helpers > 0 && block_size > 0 && data.size() >= kHashOffloadMinBytes) {
    // Pieces of one hash block each (whole CRC blocks: those are at most 4 KiB).
    static_assert(kHashedPieceBytes == DcpRecordHasher::kBlockBytes);
    const size_t piece_bytes = kHashedPieceBytes;
    const size_t pieces = (data.size() + piece_bytes - 1) / piece_bytes;
    blocks->resize((data.size() + block_size - 1) / block_size);
    std::vector<uint64_t> sums(pieces);
    auto piece_span = [&](size_t begin, size_t end) {
      return data.subspan(begin * piece_bytes,
                          std::min(end * piece_bytes, data.size()) - begin * piece_bytes);
    };
    AppendWhileHelpersHash(
        pieces, kMaxHashedRunBytes / piece_bytes, helpers,
        [&](size_t i) {
          const std::span<const std::byte> piece = piece_span(i, i + 1);
          const size_t first = i * piece_bytes / block_size;
          for (size_t b = 0; b * block_size < piece.size(); ++b) {
            (*blocks)[first + b] = Crc32(piece.subspan(
                b * block_size, std::min<size_t>(block_size, piece.size() - b * block_size)));
          }
          sums[i] = BlockChecksum(piece, binding, i);
        },
        [&](size_t begin, size_t end) {
          if (each_piece) each_piece(piece_span(begin, end));
        });
    return {CombineBlockCrcs(*blocks, block_size, data.size()), SumsChecksum(sums, binding)};
  }
  if (block_size > 0) blocks->reserve((data.size() + block_size - 1) / block_size);
  uint32_t crc = 0;
  DcpRecordHasher hasher(binding);
  for (size_t at = 0; at < data.size(); at += kPieceBytes) {
    const std::span<const std::byte> piece =
        data.subspan(at, std::min(kPieceBytes, data.size() - at));
    if (block_size == 0) crc = Crc32(piece, crc);
    for (size_t b = 0; block_size > 0 && b < piece.size(); b += block_size) {
      blocks->push_back(Crc32(piece.subspan(b, std::min<size_t>(block_size, piece.size() - b))));
    }
    hasher.Update(piece);
    if (each_piece) each_piece(piece);
  }
  return {block_size == 0 ? crc : CombineBlockCrcs(*blocks, block_size, data.size()),
          hasher.Digest()};
}

uint32_t CombineBlockCrcs(const std::vector<uint32_t>& blocks, uint32_t block_size,
                          uint64_t data_size) {
  const uLong op = crc32_combine_gen64(block_size);
  uLong crc = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint64_t size = std::min<uint64_t>(block_size, data_size - i * block_size);
    crc = i == 0               ? blocks[0]
          : size == block_size ? crc32_combine_op(crc, blocks[i], op)
                               : crc32_combine64(crc, blocks[i], static_cast<z_off64_t>(size));
  }
  return static_cast<uint32_t>(crc);
}

std::vector<uint32_t> DcpTileCrcs(const BlockLayout& layout, std::span<const std::byte> data) {
  std::vector<uint32_t> crcs(layout.tiles());
  for (uint64_t t = 0; t < crcs.size(); ++t) {
    uint32_t crc = 0;
    layout.ForEachPart(
        t, [&](uint64_t offset, uint64_t bytes) { crc = Crc32(data.subspan(offset, bytes), crc); });
    crcs[t] = crc;
  }
  return crcs;
}

void DcpIndexWriter::Add(const DcpIndexEntry& entry, std::vector<uint32_t> block_crcs) {
  entries_.push_back(entry);
  block_crcs_.push_back(std::move(block_crcs));
}

std::string DcpIndexWriter::Finish(uint64_t items_end) {
  std::string out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].crcs_offset = block_crcs_[i].empty() ? 0 : items_end + out.size();
    for (uint32_t crc : block_crcs_[i]) Put(out, crc, 4);
  }
  std::sort(entries_.begin(), entries_.end(), [](const DcpIndexEntry& a, const DcpIndexEntry& b) {
    return a.item_offset < b.item_offset;
  });
  const uint64_t table_offset = items_end + out.size();
  std::string table;
  for (const DcpIndexEntry& e : entries_) {
    Put(table, e.item_offset, 8);
    Put(table, e.data_offset, 8);
    Put(table, e.data_size, 8);
    Put(table, e.binding, 8);
    Put(table, e.crcs_offset, 8);
    Put(table, e.hash.value_or(0), 8);
    Put(table, e.crc, 4);
    Put(table, e.block_size, 4);
    Put(table, e.tiles, 8);
  }
  out += table;
  Put(out, items_end, 8);
  Put(out, table_offset, 8);
  Put(out, entries_.size(), 8);
  Put(out, Checksum(std::as_bytes(std::span(table.data(), table.size()))), 8);
  out.append(kMagic, sizeof kMagic);
  return out;
}

std::optional<DcpIndexTrailer> ParseDcpIndexTrailer(std::span<const std::byte> last,
                                                    uint64_t file_size, const std::string& source) {
  if (last.size() != kDcpIndexTrailerBytes) return std::nullopt;
  int version;
  if (std::memcmp(last.data() + 32, kMagic, 8) == 0) {
    version = 3;
  } else if (std::memcmp(last.data() + 32, kMagicV2, 8) == 0) {
    version = 2;
  } else if (std::memcmp(last.data() + 32, kMagicV1, 8) == 0) {
    version = 1;
  } else {
    return std::nullopt;
  }
  DcpIndexTrailer t{Get(last.data(), 8), Get(last.data() + 8, 8), Get(last.data() + 16, 8),
                    Get(last.data() + 24, 8), version};
  const uint64_t table_end = file_size - kDcpIndexTrailerBytes;
  const uint64_t entry_bytes = EntryBytes(version);
  if (t.items_end > t.table_offset || t.table_offset > table_end ||
      t.count != (table_end - t.table_offset) / entry_bytes ||
      (table_end - t.table_offset) % entry_bytes != 0) {
    Fail(ErrorKind::kCorruption,
         "{}: the item index trailer is damaged (items end at {}, a table of {} entries at {}, "
         "in a file of {} bytes)",
         source, t.items_end, t.count, t.table_offset, file_size);
  }
  return t;
}

std::vector<DcpIndexEntry> ParseDcpIndexTable(std::span<const std::byte> bytes,
                                              const DcpIndexTrailer& trailer,
                                              const std::string& source) {
  const uint64_t entry_bytes = EntryBytes(trailer.version);
  if (bytes.size() != trailer.count * entry_bytes || Checksum(bytes) != trailer.checksum) {
    Fail(ErrorKind::kCorruption,
         "{}: the item index table ({} entries at byte {}) fails its checksum", source,
         trailer.count, trailer.table_offset);
  }
  std::vector<DcpIndexEntry> entries(trailer.count);
  for (uint64_t i = 0; i < trailer.count; ++i) {
    const std::byte* p = bytes.data() + i * entry_bytes;
    DcpIndexEntry& e = entries[i];
    e.item_offset = Get(p, 8);
    e.data_offset = Get(p + 8, 8);
    e.data_size = Get(p + 16, 8);
    e.binding = Get(p + 24, 8);
    e.crcs_offset = Get(p + 32, 8);
    if (trailer.version >= 2) {
      e.hash = Get(p + 40, 8);
      p += 8;
    }
    e.crc = static_cast<uint32_t>(Get(p + 40, 4));
    e.block_size = static_cast<uint32_t>(Get(p + 44, 4));
    if (trailer.version >= 3) e.tiles = Get(p + 48, 8);
    // Written by distckpt and checksummed: anything out of place is damage.
    const bool ok =
        e.item_offset <= e.data_offset && e.data_offset <= trailer.items_end &&
        e.data_size <= trailer.items_end - e.data_offset &&
        (i == 0 || entries[i - 1].item_offset < e.item_offset) &&
        (e.tiles == 0 || e.block_size > 0) &&
        (e.block_size == 0 || (e.crcs_offset >= trailer.items_end &&
                               DcpBlockCount(e) <= (trailer.table_offset - e.crcs_offset) / 4));
    if (!ok) {
      Fail(ErrorKind::kCorruption, "{}: item index entry {} (item at byte {}) is inconsistent",
           source, i, e.item_offset);
    }
  }
  return entries;
}

std::vector<uint32_t> ParseDcpBlockCrcs(std::span<const std::byte> bytes) {
  std::vector<uint32_t> crcs(bytes.size() / 4);
  for (size_t i = 0; i < crcs.size(); ++i)
    crcs[i] = static_cast<uint32_t>(Get(bytes.data() + 4 * i, 4));
  return crcs;
}

}  // namespace distckpt
