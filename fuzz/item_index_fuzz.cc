// libFuzzer target: a DCP item index as a sidecar holds it
// (format/dcp/item_index.h, sidecar_index.h; the same bytes distckpt appends
// to its own .distcp files): the trailer, then the table (versions 1 to 3) or
// the directory and every group (versions 4 and 5), and each entry's block
// CRCs, read as DcpReader reads them. Each input is parsed as given, then
// again with its checksums recomputed: a sidecar in a user's cache directory
// can be written by anyone, and its xxHash3s detect damage, they do not
// authenticate, so the entries' varints behind valid checksums must be
// safe too. Any input parses or throws CheckpointError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "format/dcp/item_index.h"
#include "io/checksum.h"

namespace {

using distckpt::DcpIndexTrailer;

uint64_t Get64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only, as the format's own reader
}
void Put64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

// The index's bytes as the data file's offsets see them: byte `at` of the
// file is byte `at - items_end` of the sidecar.
struct Sidecar {
  std::span<const std::byte> bytes;
  uint64_t items_end = 0;
  uint64_t file_size() const { return items_end + bytes.size(); }
  void Read(uint64_t offset, std::span<std::byte> dst) const {
    if (offset < items_end || offset - items_end > bytes.size() ||
        dst.size() > bytes.size() - (offset - items_end)) {
      distckpt::Fail(distckpt::ErrorKind::kCorruption, "fuzz: read of {} bytes at {} outside",
                     dst.size(), offset);
    }
    if (!dst.empty()) std::memcpy(dst.data(), bytes.data() + (offset - items_end), dst.size());
  }
};

void Parse(std::span<const std::byte> bytes) {
  if (bytes.size() < distckpt::kDcpIndexTrailerBytes) return;
  const std::span<const std::byte> last = bytes.last(distckpt::kDcpIndexTrailerBytes);
  Sidecar sidecar{bytes, Get64(last.data())};
  if (sidecar.items_end > UINT64_MAX - bytes.size()) return;
  std::optional<DcpIndexTrailer> trailer =
      distckpt::ParseDcpIndexTrailer(last, sidecar.file_size(), "fuzz");
  if (!trailer) return;
  auto read = [&](uint64_t offset, std::span<std::byte> dst) { sidecar.Read(offset, dst); };
  // The table whole (every entry and its checks), then the reader's path:
  // the head, and each entry found by its item offset, its block CRCs read.
  std::vector<std::byte> table(sidecar.file_size() - distckpt::kDcpIndexTrailerBytes -
                               trailer->table_offset);
  sidecar.Read(trailer->table_offset, table);
  const std::vector<distckpt::DcpIndexEntry> entries =
      distckpt::ParseDcpIndexTable(table, *trailer, "fuzz");
  distckpt::DcpFileIndex index(*trailer, sidecar.file_size(), "fuzz", read);
  for (const distckpt::DcpIndexEntry& e : entries) {
    const distckpt::DcpIndexEntry* found = index.Find(e.item_offset, read);
    if (!found || found->block_size == 0) continue;
    const uint64_t blocks = distckpt::DcpBlockCount(*found);
    if (blocks > bytes.size() / 4) continue;  // the reader's bounds are the data file's
    std::vector<std::byte> crcs(4 * blocks);
    sidecar.Read(found->crcs_offset, crcs);
    distckpt::ParseDcpBlockCrcs(crcs);
  }
  index.Find(trailer->items_end / 2, read);
}

// Recomputes the checksums the trailer and directory hold; false when the
// trailer's fields do not locate them inside the input.
bool FixChecksums(std::vector<std::byte>& bytes) {
  const uint64_t n = bytes.size(), T = distckpt::kDcpIndexTrailerBytes;
  if (n < T) return false;
  std::byte* trailer = bytes.data() + n - T;
  const uint64_t items_end = Get64(trailer), table_offset = Get64(trailer + 8);
  const uint64_t count = Get64(trailer + 16);
  if (table_offset < items_end || table_offset - items_end > n - T) return false;
  const uint64_t table = table_offset - items_end, table_end = n - T;
  const bool v4 = std::memcmp(trailer + 32, "DCPINDX4", 8) == 0 ||
                  std::memcmp(trailer + 32, "DCPINDX5", 8) == 0;
  if (!v4) {
    Put64(trailer + 24, distckpt::Checksum(std::span(bytes).subspan(table, table_end - table)));
    return true;
  }
  const uint64_t groups =
      (count + distckpt::kDcpIndexGroupEntries - 1) / distckpt::kDcpIndexGroupEntries;
  const uint64_t D = distckpt::kDcpIndexDirectoryEntryBytes;
  if (groups > (table_end - table) / D) return false;
  const uint64_t directory = table_end - groups * D;
  for (uint64_t g = 0; g < groups; ++g) {
    std::byte* entry = bytes.data() + directory + g * D;
    const uint64_t begin = Get64(entry + 8);
    const uint64_t end = g + 1 < groups ? Get64(entry + D + 8) : directory + items_end;
    if (begin < items_end || end < begin || end - items_end > directory) continue;
    Put64(entry + 24, distckpt::Checksum(std::span(bytes).subspan(begin - items_end, end - begin)));
  }
  Put64(trailer + 24, distckpt::Checksum(std::span(bytes).subspan(directory, groups * D)));
  return true;
}

void ParseOrRefuse(std::span<const std::byte> bytes) {
  try {
    Parse(bytes);
  } catch (const distckpt::CheckpointError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  ParseOrRefuse(bytes);
  if (FixChecksums(bytes)) ParseOrRefuse(bytes);
  return 0;
}
