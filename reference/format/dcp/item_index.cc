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
constexpr char kMagicV3[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '3'};
constexpr char kMagicV4[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '4'};
constexpr char kMagic[8] = {'D', 'C', 'P', 'I', 'N', 'D', 'X', '5'};
// The fewest bytes of a version-4 (or 5) entry: 5 varints of one byte, binding, hash, crc.
constexpr uint64_t kMinEntryBytes = 5 + 8 + 8 + 4;
constexpr uint64_t EntryBytes(int version) { return version == 1 ? 48 : version == 2 ? 56 : 64; }
constexpr uint32_t kMaxBlock = 4 << 10;
constexpr uint32_t kMinBlock = 1 << 10;
constexpr size_t kPieceBytes = 256 << 10;  // a multiple of every block size

void Put(std::string& out, uint64_t value, int bytes) { AppendLittleEndian(out, value, bytes); }

uint64_t Get(const std::byte* p, int bytes) { return LoadLittleEndian(p, bytes); }

void PutVarint(std::string& out, uint64_t value) {
  for (; value >= 0x80; value >>= 7) out += static_cast<char>((value & 0x7f) | 0x80);
  out += static_cast<char>(value);
}

// Reads a group's bytes in order; any read past its end or an overlong
// varint sets `bad`.
struct GroupCursor {
  std::span<const std::byte> bytes;
  size_t at = 0;
  bool bad = false;
  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= bytes.size()) break;
      const uint64_t b = static_cast<uint8_t>(bytes[at++]);
      if (shift == 63 && b > 1) break;
      value |= (b & 0x7f) << shift;
      if ((b & 0x80) == 0) return value;
    }
    bad = true;
    return 0;
  }
  uint64_t Fixed(int n) {
    if (bytes.size() - at < static_cast<size_t>(n)) {
      bad = true;
      return 0;
    }
    at += n;
    return Get(bytes.data() + at - n, n);
  }
};

// What every entry of any version must satisfy (written by distckpt and
// checksummed: anything out of place is damage). `previous`: the entry
// before it in item order, if any.
bool EntryFits(const DcpIndexEntry& e, const DcpIndexEntry* previous,
               const DcpIndexTrailer& trailer) {
  return e.item_offset <= e.data_offset && e.data_offset <= trailer.items_end &&
         e.data_size <= trailer.items_end - e.data_offset &&
         (previous == nullptr || previous->item_offset < e.item_offset) &&
         (e.tiles == 0 || e.block_size > 0) &&
         (e.block_size == 0 ||
          (e.crcs_offset >= trailer.items_end && e.crcs_offset <= trailer.table_offset &&
           DcpBlockCount(e) <= (trailer.table_offset - e.crcs_offset) / 4));
}

[[noreturn]] void EntryDamaged(const std::string& source, uint64_t i, uint64_t item_offset) {
  Fail(ErrorKind::kCorruption, "{}: item index entry {} (item at byte {}) is inconsistent", source,
       i, item_offset);
}

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

std::string DcpIndexWriter::Finish(uint64_t items_end, int version) {
  // By item offset, the block CRCs in the same order (version 4 derives
  // each entry's crcs_offset from those before it).
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return entries_[a].item_offset < entries_[b].item_offset; });
  std::string out;
  std::vector<DcpIndexEntry> entries;
  entries.reserve(order.size());
  for (size_t i : order) {
    entries.push_back(entries_[i]);
    entries.back().crcs_offset = block_crcs_[i].empty() ? 0 : items_end + out.size();
    for (uint32_t crc : block_crcs_[i]) Put(out, crc, 4);
  }
  const uint64_t table_offset = items_end + out.size();
  std::string table;
  if (version == 3) {
    for (const DcpIndexEntry& e : entries) {
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
  } else {
    std::string directory;
    uint64_t crcs = items_end;  // the running offset of the next block CRC
    for (size_t g = 0; g * kDcpIndexGroupEntries < entries.size(); ++g) {
      const size_t first = g * kDcpIndexGroupEntries;
      const size_t last = std::min<size_t>(first + kDcpIndexGroupEntries, entries.size());
      Put(directory, entries[first].item_offset, 8);
      Put(directory, table_offset + table.size(), 8);
      Put(directory, crcs, 8);
      std::string group;
      for (size_t i = first; i < last; ++i) {
        const DcpIndexEntry& e = entries[i];
        if (e.block_size > 0) {
          if (e.crcs_offset != crcs) {
            Fail(ErrorKind::kInvalidArgument,
                 "item index: the block CRCs of the item at byte {} are "
                 "not where its entry's order puts them",
                 e.item_offset);
          }
          crcs += 4 * DcpBlockCount(e);
        }
        PutVarint(group, e.item_offset - entries[i == first ? i : i - 1].item_offset);
        PutVarint(group, e.data_offset - e.item_offset);
        PutVarint(group, e.data_size);
        Put(group, e.binding, 8);
        Put(group, e.hash.value_or(0), 8);
        Put(group, e.crc, 4);
        PutVarint(group, e.block_size);
        PutVarint(group, e.tiles);
      }
      Put(directory, Checksum(std::as_bytes(std::span(group.data(), group.size()))), 8);
      table += group;
    }
    out += table;
    out += directory;
    table = std::move(directory);  // the trailer's checksum is the directory's
  }
  Put(out, items_end, 8);
  Put(out, table_offset, 8);
  Put(out, entries.size(), 8);
  Put(out, Checksum(std::as_bytes(std::span(table.data(), table.size()))), 8);
  out.append(version == 3 ? kMagicV3 : version == 4 ? kMagicV4 : kMagic, sizeof kMagic);
  return out;
}

std::optional<DcpIndexTrailer> ParseDcpIndexTrailer(std::span<const std::byte> last,
                                                    uint64_t file_size, const std::string& source) {
  if (last.size() != kDcpIndexTrailerBytes) return std::nullopt;
  int version;
  if (std::memcmp(last.data() + 32, kMagic, 8) == 0) {
    version = 5;
  } else if (std::memcmp(last.data() + 32, kMagicV4, 8) == 0) {
    version = 4;
  } else if (std::memcmp(last.data() + 32, kMagicV3, 8) == 0) {
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
  bool ok = t.items_end <= t.table_offset && t.table_offset <= table_end;
  if (ok && version >= 4) {
    t.groups = (t.count + kDcpIndexGroupEntries - 1) / kDcpIndexGroupEntries;
    ok = t.count <= table_end && t.groups * kDcpIndexDirectoryEntryBytes <= table_end;
    if (ok) {
      t.directory_offset = table_end - t.groups * kDcpIndexDirectoryEntryBytes;
      ok = t.table_offset <= t.directory_offset &&
           t.count <= (t.directory_offset - t.table_offset) / kMinEntryBytes;
    }
  } else if (ok) {
    const uint64_t entry_bytes = EntryBytes(version);
    ok = t.count == (table_end - t.table_offset) / entry_bytes &&
         (table_end - t.table_offset) % entry_bytes == 0;
  }
  if (!ok) {
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
  if (trailer.version >= 4) {
    const uint64_t directory_at = trailer.directory_offset - trailer.table_offset;
    if (bytes.size() < directory_at) {
      Fail(ErrorKind::kCorruption, "{}: the item index ({} entries at byte {}) is truncated",
           source, trailer.count, trailer.table_offset);
    }
    std::vector<DcpIndexEntry> entries;
    entries.reserve(trailer.count);
    for (const DcpIndexGroup& g :
         ParseDcpIndexDirectory(bytes.subspan(directory_at), trailer, source)) {
      for (DcpIndexEntry& e :
           ParseDcpIndexGroup(bytes.subspan(g.begin - trailer.table_offset, g.end - g.begin), g,
                              trailer, source)) {
        entries.push_back(e);
      }
    }
    return entries;
  }
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
    if (!EntryFits(e, i == 0 ? nullptr : &entries[i - 1], trailer))
      EntryDamaged(source, i, e.item_offset);
  }
  return entries;
}

std::vector<DcpIndexGroup> ParseDcpIndexDirectory(std::span<const std::byte> bytes,
                                                  const DcpIndexTrailer& trailer,
                                                  const std::string& source) {
  if (bytes.size() != trailer.groups * kDcpIndexDirectoryEntryBytes ||
      Checksum(bytes) != trailer.checksum) {
    Fail(ErrorKind::kCorruption,
         "{}: the item index directory ({} groups at byte {}) fails its checksum", source,
         trailer.groups, trailer.directory_offset);
  }
  std::vector<DcpIndexGroup> groups(trailer.groups);
  for (uint64_t g = 0; g < groups.size(); ++g) {
    const std::byte* p = bytes.data() + g * kDcpIndexDirectoryEntryBytes;
    DcpIndexGroup& group = groups[g];
    group.first_item = Get(p, 8);
    group.begin = Get(p + 8, 8);
    group.crcs_offset = Get(p + 16, 8);
    group.hash = Get(p + 24, 8);
    group.first_entry = g * kDcpIndexGroupEntries;
    group.entries = std::min(kDcpIndexGroupEntries, trailer.count - group.first_entry);
    const bool ok = group.begin == (g == 0 ? trailer.table_offset : groups[g - 1].end) &&
                    group.first_item < trailer.items_end &&
                    (g == 0 || groups[g - 1].first_item < group.first_item) &&
                    group.crcs_offset >= trailer.items_end &&
                    group.crcs_offset <= trailer.table_offset;
    group.end = g + 1 < groups.size() ? Get(p + kDcpIndexDirectoryEntryBytes + 8, 8)
                                      : trailer.directory_offset;
    if (!ok || group.end < group.begin || group.end > trailer.directory_offset ||
        group.end - group.begin < group.entries * kMinEntryBytes) {
      Fail(ErrorKind::kCorruption, "{}: item index group {} (byte {}) is inconsistent", source, g,
           group.begin);
    }
  }
  return groups;
}

std::vector<DcpIndexEntry> ParseDcpIndexGroup(std::span<const std::byte> bytes,
                                              const DcpIndexGroup& group,
                                              const DcpIndexTrailer& trailer,
                                              const std::string& source) {
  if (bytes.size() != group.end - group.begin || Checksum(bytes) != group.hash) {
    Fail(ErrorKind::kCorruption,
         "{}: item index group {} ({} entries at byte {}) fails its checksum", source,
         group.first_entry / kDcpIndexGroupEntries, group.entries, group.begin);
  }
  std::vector<DcpIndexEntry> entries(group.entries);
  GroupCursor in{bytes};
  uint64_t crcs = group.crcs_offset;
  for (uint64_t i = 0; i < entries.size(); ++i) {
    DcpIndexEntry& e = entries[i];
    const uint64_t previous = i == 0 ? group.first_item : entries[i - 1].item_offset;
    const uint64_t delta = in.Varint();
    e.item_offset = previous + delta;
    const uint64_t header = in.Varint();
    e.data_offset = e.item_offset + header;
    e.data_size = in.Varint();
    e.binding = in.Fixed(8);
    e.hash = in.Fixed(8);
    e.crc = static_cast<uint32_t>(in.Fixed(4));
    const uint64_t block_size = in.Varint();
    e.block_size = static_cast<uint32_t>(block_size);
    e.tiles = in.Varint();
    e.flat_rows = trailer.version >= 5;
    e.crcs_offset = e.block_size == 0 ? 0 : crcs;
    const bool ok = !in.bad && (i == 0 ? delta == 0 : delta > 0) && delta <= trailer.items_end &&
                    e.item_offset >= previous && header <= trailer.items_end &&
                    e.data_offset >= e.item_offset && block_size <= UINT32_MAX &&
                    EntryFits(e, nullptr, trailer);
    if (!ok) EntryDamaged(source, group.first_entry + i, e.item_offset);
    crcs += 4 * DcpBlockCount(e);
  }
  if (in.at != bytes.size()) EntryDamaged(source, group.first_entry + entries.size(), 0);
  return entries;
}

DcpIndexRead DcpReadFrom(const RandomAccessFile& file, std::atomic<uint64_t>* bytes_read) {
  return [&file, bytes_read](uint64_t offset, std::span<std::byte> dst) {
    file.Read(offset, dst);
    *bytes_read += dst.size();
  };
}

std::pair<uint64_t, uint64_t> DcpFileIndex::HeadBytes(const DcpIndexTrailer& trailer,
                                                      uint64_t file_size) {
  return {trailer.version < 4 ? trailer.table_offset : trailer.directory_offset,
          file_size - kDcpIndexTrailerBytes};
}

DcpFileIndex::DcpFileIndex(const DcpIndexTrailer& trailer, uint64_t file_size, std::string source,
                           const DcpIndexRead& read)
    : trailer_(trailer), source_(std::move(source)) {
  const auto [begin, end] = HeadBytes(trailer_, file_size);
  std::vector<std::byte> head(end - begin);
  read(begin, head);
  if (trailer_.version < 4) {
    for (const DcpIndexEntry& e : ParseDcpIndexTable(head, trailer_, source_))
      entries_.emplace(e.item_offset, e);
    return;
  }
  groups_ = ParseDcpIndexDirectory(head, trailer_, source_);
  loaded_.assign(groups_.size(), false);
}

uint64_t DcpFileIndex::GroupOf(uint64_t item_offset) const {
  auto it = std::upper_bound(
      groups_.begin(), groups_.end(), item_offset,
      [](uint64_t offset, const DcpIndexGroup& g) { return offset < g.first_item; });
  return it == groups_.begin() ? groups_.size() : static_cast<uint64_t>(it - groups_.begin() - 1);
}

void DcpFileIndex::LoadGroups(uint64_t first, uint64_t last, const DcpIndexRead& read) {
  std::vector<std::byte> bytes(groups_[last - 1].end - groups_[first].begin);
  read(groups_[first].begin, bytes);
  for (uint64_t g = first; g < last; ++g) {
    const DcpIndexGroup& group = groups_[g];
    for (const DcpIndexEntry& e :
         ParseDcpIndexGroup(std::span<const std::byte>(bytes).subspan(
                                group.begin - groups_[first].begin, group.end - group.begin),
                            group, trailer_, source_)) {
      entries_.emplace(e.item_offset, e);
    }
    loaded_[g] = true;
  }
}

const DcpIndexEntry* DcpFileIndex::Find(uint64_t item_offset, const DcpIndexRead& read) {
  std::lock_guard lock(mu_);
  if (trailer_.version >= 4) {
    const uint64_t g = GroupOf(item_offset);
    if (g == groups_.size()) return nullptr;
    if (!loaded_[g]) LoadGroups(g, g + 1, read);
  }
  auto it = entries_.find(item_offset);
  return it == entries_.end() ? nullptr : &it->second;
}

void DcpFileIndex::Prefetch(std::span<const uint64_t> item_offsets, const DcpIndexRead& read) {
  if (trailer_.version < 4) return;
  std::lock_guard lock(mu_);
  std::vector<uint64_t> wanted;
  for (uint64_t g : GroupsOf(item_offsets)) {
    if (!loaded_[g]) wanted.push_back(g);
  }
  for (size_t i = 0; i < wanted.size();) {
    size_t j = i + 1;
    while (j < wanted.size() && wanted[j] == wanted[j - 1] + 1) ++j;
    LoadGroups(wanted[i], wanted[j - 1] + 1, read);
    i = j;
  }
}

std::vector<uint64_t> DcpFileIndex::GroupsOf(std::span<const uint64_t> item_offsets) const {
  std::vector<uint64_t> groups;
  for (uint64_t offset : item_offsets) {
    const uint64_t g = GroupOf(offset);
    if (g < groups_.size()) groups.push_back(g);
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

std::vector<std::pair<uint64_t, uint64_t>> DcpFileIndex::GroupRuns(
    std::span<const uint64_t> groups) const {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  // Groups past the directory's (none from a rank that parsed the same one) are left out.
  groups =
      groups.first(std::lower_bound(groups.begin(), groups.end(), groups_.size()) - groups.begin());
  for (size_t i = 0; i < groups.size();) {
    size_t j = i + 1;
    while (j < groups.size() && groups[j] == groups[j - 1] + 1) ++j;
    runs.emplace_back(groups_[groups[i]].begin, groups_[groups[j - 1]].end);
    i = j;
  }
  return runs;
}

std::vector<uint32_t> ParseDcpBlockCrcs(std::span<const std::byte> bytes) {
  std::vector<uint32_t> crcs(bytes.size() / 4);
  for (size_t i = 0; i < crcs.size(); ++i)
    crcs[i] = static_cast<uint32_t>(Get(bytes.data() + 4 * i, 4));
  return crcs;
}

}  // namespace distckpt
