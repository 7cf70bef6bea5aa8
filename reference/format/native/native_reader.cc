#include "format/native/native_reader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "format/block_checksums.h"
#include "format/block_reads.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

using Describe = std::function<std::string()>;

constexpr uint64_t kPieceBytes = 256 << 10;  // well inside a core's L2

std::string ChunkName(const StoredTensor& tensor, const StoredChunk& chunk) {
  std::string name = fmt::format("key '{}' chunk at global offset {}", tensor.key,
                                 ShapeToString(chunk.box.offset));
  if (chunk.flat) name += fmt::format(" (flat [{}, {}))", chunk.flat->start, chunk.flat->stop);
  return name + fmt::format(" written by rank {}", chunk.writer_rank);
}

void VerifyChecksum(uint64_t actual, uint64_t expected, const RandomAccessFile& file,
                    const Describe& what) {
  if (actual != expected) {
    Fail(ErrorKind::kCorruption, "checksum mismatch in {} for {}: expected {}, got {}", file.path(),
         what(), ChecksumToHex(expected), ChecksumToHex(actual));
  }
}

// Version 3: the chunk's block checksums, read from after its payload and
// checked against the checksum metadata.json keeps of them.
void CheckSums(const RandomAccessFile& file, const StoredChunk& chunk,
               std::span<const uint64_t> sums, uint64_t seed, const Describe& what) {
  const uint64_t actual = SumsChecksum(sums, seed);
  if (actual != *chunk.sums_checksum) {
    Fail(ErrorKind::kCorruption,
         "checksum mismatch in {} for {}: its block checksums (the {} bytes at file offset {}, "
         "after the payload) hash to {}, metadata.json records {}",
         file.path(), what(), 8 * sums.size(), chunk.offset + chunk.length, ChecksumToHex(actual),
         ChecksumToHex(*chunk.sums_checksum));
  }
}

std::vector<uint64_t> ReadSums(const RandomAccessFile& file, const StoredChunk& chunk,
                               uint64_t seed, const Describe& what) {
  std::vector<uint64_t> sums(SumsBytes(chunk) / 8);
  file.Read(chunk.offset + chunk.length, std::as_writable_bytes(std::span(sums)));
  CheckSums(file, chunk, sums, seed, what);
  return sums;
}

// Checks that `runs` are sorted, disjoint and inside the chunk; returns the
// bytes they cover.
uint64_t CoveredBytes(const StoredChunk& chunk, std::span<const ReadRun> runs,
                      const Describe& what) {
  uint64_t covered = 0;
  uint64_t end = 0;
  for (const ReadRun& run : runs) {
    if (run.offset_in_chunk < end || run.offset_in_chunk > chunk.length ||
        run.length > chunk.length - run.offset_in_chunk) {
      Fail(ErrorKind::kInvalidArgument,
           "read runs for {} are unsorted, overlap or exceed its {} bytes (run at {}, {} bytes)",
           what(), chunk.length, run.offset_in_chunk, run.length);
    }
    end = run.offset_in_chunk + run.length;
    covered += run.length;
  }
  return covered;
}

// A block (tile) of a version 2, 3 or 4 chunk that does not match its checksum.
[[noreturn]] void BlockMismatch(const RandomAccessFile& file, const StoredChunk& chunk,
                                const BlockLayout& layout, uint64_t t, uint64_t expected,
                                uint64_t actual, const Describe& what) {
  uint64_t from = chunk.length, to = 0, parts = 0;
  layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
    from = std::min(from, offset);
    to = std::max(to, offset + bytes);
    ++parts;
  });
  Fail(ErrorKind::kCorruption,
       "checksum mismatch in {} for {}: block {} (bytes [{}, {}) of the chunk{}, file offset {}): "
       "expected {}, got {}",
       file.path(), what(), t, from, to, parts > 1 ? fmt::format(" in {} rows", parts) : "",
       chunk.offset + from, ChecksumToHex(expected), ChecksumToHex(actual));
}

// Reads the blocks of a version 2, 3 or 4 chunk that `runs` touch (every
// block when `all`), checking each against `sums`; returns the bytes read.
uint64_t ReadVerifiedBlocks(const RandomAccessFile& file, const StoredChunk& chunk,
                            const BlockLayout& layout, std::span<const uint64_t> sums,
                            uint64_t seed, std::span<const ReadRun> runs, bool all,
                            const Describe& what) {
  return ReadCheckedTiles(file, chunk.offset, layout, runs, all, sums, seed,
                          [&](uint64_t t, uint64_t actual) {
                            BlockMismatch(file, chunk, layout, t, sums[t], actual, what);
                          });
}

// Small version 3 chunks read whole, each into one destination: payload and
// block checksums in one system call (ReadGathered), then the checksums
// checked against metadata.json and every block against them, still in the
// cache. Several such chunks lying back to back in one file (a rank's
// tensors as it wrote them) share that call, up to kGatheredBytes in all.
// On a VM a system call costs about a microsecond, and reading 64 KiB per
// call takes 1.3x the time of 256 KiB per call (bench/README.md): a load
// of 256 chunks of 64 KiB took 512 calls, one per chunk, now about 64.
// The same checks, messages and stats as ReadChunk of each in turn.
constexpr uint64_t kGatheredChunkBytes = 1 << 20;
constexpr uint64_t kGatheredBytes = 1 << 20;
constexpr size_t kGatheredChunks = 256;  // 512 parts: within IOV_MAX (1024)

bool ReadsWholeIntoOne(const StoredChunk& chunk, std::span<const ReadRun> runs) {
  return chunk.sums_checksum && chunk.length <= kGatheredChunkBytes && runs.size() == 1 &&
         runs[0].offset_in_chunk == 0 && runs[0].length == chunk.length;
}

// Whether `read` is such a chunk under `policy`.
bool GathersWhole(const ChunkRead& read, VerifyPolicy policy) {
  return policy != VerifyPolicy::kNever && read.chunk->block_size != 0 &&
         ReadsWholeIntoOne(*read.chunk, read.runs);
}

}  // namespace

void NativeReader::ReadWholeWithSums(const RandomAccessFile& file,
                                     std::span<const ChunkRead> reads) {
  // Every chunk's block checksums in one allocation (sums[i]: chunk i's).
  std::vector<uint64_t> storage;
  std::vector<std::span<uint64_t>> sums(reads.size());
  uint64_t words = 0;
  for (const ChunkRead& read : reads) words += SumsBytes(*read.chunk) / 8;
  storage.resize(words);
  std::vector<std::span<std::byte>> parts;
  parts.reserve(2 * reads.size());
  words = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    const StoredChunk& chunk = *reads[i].chunk;
    sums[i] = std::span(storage).subspan(words, SumsBytes(chunk) / 8);
    words += sums[i].size();
    parts.push_back(std::span(reads[i].runs[0].dst, chunk.length));
    parts.push_back(std::as_writable_bytes(sums[i]));
  }
  file.ReadGathered(reads[0].chunk->offset, parts);
  uint64_t bytes = 0, sums_bytes = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    const StoredTensor& tensor = *reads[i].tensor;
    const StoredChunk& chunk = *reads[i].chunk;
    const Describe what = [&] { return ChunkName(tensor, chunk); };
    ChunkLayouts::Chunk own;
    const auto& [layout, seed] = Layout(tensor, chunk, own);
    CheckSums(file, chunk, sums[i], seed, what);
    CheckTiles(layout, std::span(reads[i].runs[0].dst, chunk.length), sums[i], seed,
               [&](uint64_t t, uint64_t actual) {
                 BlockMismatch(file, chunk, layout, t, sums[i][t], actual, what);
               });
    sums_bytes += SumsBytes(chunk);
    bytes += chunk.length;
  }
  // Once per call: the counters are shared by every reading thread.
  stats_.checksum_bytes_read += sums_bytes;
  stats_.bytes_read += bytes;
  stats_.chunks_verified += reads.size();
}

void NativeReader::ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy) {
  for (size_t i = 0; i < reads.size();) {
    const ChunkRead& read = reads[i];
    const StoredChunk& first = *read.chunk;
    if (!GathersWhole(read, policy) || first.length == 0) {
      ReadChunk(*read.tensor, first, read.runs, policy);
      ++i;
      continue;
    }
    const RandomAccessFile& file =
        files_.Open(first.file, first.offset, first.length + SumsBytes(first),
                    [&] { return ChunkName(*read.tensor, first); });
    // Extend while the next chunk starts where this one's sums end, in the
    // same file and inside its size (a chunk past the end is read alone, so
    // its error comes after the chunks before it are checked, as ReadChunk
    // of each in turn gives).
    uint64_t end = first.offset + first.length + SumsBytes(first);
    uint64_t bytes = first.length;
    size_t j = i + 1;
    for (; j < reads.size() && j - i < kGatheredChunks; ++j) {
      const StoredChunk& next = *reads[j].chunk;
      const uint64_t next_end = next.offset + next.length + SumsBytes(next);
      if (!GathersWhole(reads[j], policy) || next.length == 0 || next.file != first.file ||
          next.offset != end || next_end > file.size() || bytes + next.length > kGatheredBytes) {
        break;
      }
      end = next_end;
      bytes += next.length;
    }
    ReadWholeWithSums(file, reads.subspan(i, j - i));
    i = j;
  }
}

// The block checksums of a version 2 or 3 chunk (version 3: read into
// `storage` and checked against metadata.json).
std::span<const uint64_t> NativeReader::BlockSums(const RandomAccessFile& file,
                                                  const StoredChunk& chunk, uint64_t seed,
                                                  const Describe& what,
                                                  std::vector<uint64_t>& storage) {
  if (!chunk.sums_checksum) return chunk.block_checksums;
  storage = ReadSums(file, chunk, seed, what);
  stats_.checksum_bytes_read += SumsBytes(chunk);
  return storage;
}

NativeReader::NativeReader(Env* env, std::string dir,
                           std::shared_ptr<const CheckpointMetadata> metadata,
                           std::shared_ptr<ChunkLayouts> layouts)
    : metadata_(std::move(metadata)),
      layouts_(layouts ? std::move(layouts) : std::make_shared<ChunkLayouts>()),
      files_(env, std::move(dir), kMetadataFileName) {}

const ChunkLayouts::Chunk& NativeReader::Layout(const StoredTensor& tensor,
                                                const StoredChunk& chunk,
                                                ChunkLayouts::Chunk& storage) {
  return layouts_->Get(*metadata_, tensor, chunk, storage);
}

void NativeReader::ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                             std::span<const ReadRun> runs, VerifyPolicy policy) {
  const Describe what = [&] { return ChunkName(tensor, chunk); };
  const uint64_t covered = CoveredBytes(chunk, runs, what);
  if (covered == 0 && chunk.length > 0) return;
  const bool blocks = policy != VerifyPolicy::kNever && chunk.block_size != 0;  // versions 2, 3
  // Version 3: the file must also hold the block checksums after the payload.
  const RandomAccessFile& file =
      files_.Open(chunk.file, chunk.offset, chunk.length + (blocks ? SumsBytes(chunk) : 0), what);
  const bool whole = covered == chunk.length;  // sorted and disjoint: they tile the chunk
  if (blocks && ReadsWholeIntoOne(chunk, runs)) {
    const ChunkRead read{&tensor, &chunk, runs};
    ReadWholeWithSums(file, std::span(&read, 1));
    return;
  }
  if (blocks) {
    std::vector<uint64_t> storage;
    ChunkLayouts::Chunk own;
    const auto& [layout, seed] = Layout(tensor, chunk, own);
    const std::span<const uint64_t> sums = BlockSums(file, chunk, seed, what, storage);
    stats_.bytes_read += ReadVerifiedBlocks(file, chunk, layout, sums, seed, runs,
                                            policy == VerifyPolicy::kAlways, what);
    ++stats_.chunks_verified;
    return;
  }
  const bool verify = policy != VerifyPolicy::kNever && chunk.checksum.has_value();

  if (verify && !whole && policy == VerifyPolicy::kAlways) {
    // A part of a chunk with one checksum (version 1): the whole chunk is
    // hashed, read in windows of kPieceBytes, and the runs are copied out of
    // each window: one window staged, not the chunk (a load allocates its
    // destinations and a bounded window). A mismatch throws after the copies.
    Checksummer checksummer;
    std::vector<std::byte> window(std::min(kPieceBytes, chunk.length));
    size_t r = 0;  // the first run that may reach into the window
    for (uint64_t from = 0; from < chunk.length; from += window.size()) {
      const uint64_t to = std::min(chunk.length, from + window.size());
      const std::span<std::byte> piece(window.data(), to - from);
      file.Read(chunk.offset + from, piece);
      checksummer.Update(piece);
      while (r < runs.size() && runs[r].offset_in_chunk + runs[r].length <= from) ++r;
      for (size_t k = r; k < runs.size() && runs[k].offset_in_chunk < to; ++k) {
        const uint64_t a = std::max(from, runs[k].offset_in_chunk);
        const uint64_t b = std::min(to, runs[k].offset_in_chunk + runs[k].length);
        if (a < b)
          std::memcpy(runs[k].dst + (a - runs[k].offset_in_chunk), &piece[a - from], b - a);
      }
    }
    stats_.bytes_read += chunk.length;
    VerifyChecksum(checksummer.Digest(), *chunk.checksum, file, what);
    ++stats_.chunks_verified;
    return;
  }

  // Whole chunks are checksummed piece by piece right after each piece is
  // read, while it is still in the cache: one pass over memory, not two.
  // (Runs are sorted and tile the chunk, so this is the stored byte order.)
  const bool verify_whole = verify && whole;
  std::optional<Checksummer> checksummer;
  if (verify_whole) checksummer.emplace();
  for (size_t i = 0; i < runs.size();) {
    // Coalesce runs that continue each other both in the file and in memory.
    size_t j = i;
    uint64_t length = runs[i].length;
    while (j + 1 < runs.size() &&
           runs[j + 1].offset_in_chunk == runs[j].offset_in_chunk + runs[j].length &&
           runs[j + 1].dst == runs[j].dst + runs[j].length) {
      length += runs[++j].length;
    }
    const uint64_t piece_bytes = verify_whole ? kPieceBytes : length;
    for (uint64_t done = 0; done < length; done += piece_bytes) {
      std::span<std::byte> piece(runs[i].dst + done, std::min(piece_bytes, length - done));
      file.Read(chunk.offset + runs[i].offset_in_chunk + done, piece);
      if (checksummer) checksummer->Update(piece);
    }
    i = j + 1;
  }
  stats_.bytes_read += covered;

  if (verify_whole) {
    VerifyChecksum(checksummer->Digest(), *chunk.checksum, file, what);
    ++stats_.chunks_verified;
  } else {
    ++stats_.chunks_unverified;
  }
}

void NativeReader::StreamChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                               std::span<const ReadRun> ranges, VerifyPolicy policy,
                               uint64_t piece_bytes, const ConsumeBytes& consume) {
  const bool verify = policy != VerifyPolicy::kNever;
  if (policy == VerifyPolicy::kAlways || (verify && chunk.block_size == 0)) {
    CheckpointReader::StreamChunk(tensor, chunk, ranges, policy, piece_bytes, consume);
    return;
  }
  const Describe what = [&] { return ChunkName(tensor, chunk); };
  const uint64_t covered = CoveredBytes(chunk, ranges, what);
  if (covered == 0 && chunk.length > 0) return;  // (an empty chunk's checksums are checked)
  const RandomAccessFile& file =
      files_.Open(chunk.file, chunk.offset, chunk.length + (verify ? SumsBytes(chunk) : 0), what);
  const uint64_t seed = verify ? ChunkBindingSeed(tensor.key, tensor.dtype, chunk) : 0;
  std::vector<uint64_t> storage;
  const std::span<const uint64_t> sums =
      verify ? BlockSums(file, chunk, seed, what, storage) : std::span<const uint64_t>();
  if (verify && chunk.tiles != 0) {
    StreamTiles(file, tensor, chunk, ranges, sums, seed, piece_bytes, consume, what);
    ++stats_.chunks_verified;
    return;
  }
  // A range longer than what is left of the buffer is cut at a boundary of
  // blocks and of elements, so no block is read twice and every piece holds
  // whole elements; two such units fit in the buffer.
  const uint64_t unit = std::lcm<uint64_t>(verify ? chunk.block_size : 1, DTypeSize(tensor.dtype));
  const uint64_t piece = std::max(2 * unit, piece_bytes / unit * unit);
  std::vector<std::byte> buffer(std::min(piece, covered));
  std::vector<ReadRun> group;
  size_t i = 0;
  uint64_t done = 0;  // bytes of ranges[i] handed out
  while (i < ranges.size() && !buffer.empty()) {
    group.clear();
    uint64_t used = 0;
    while (i < ranges.size() && used < buffer.size()) {
      if (ranges[i].length == 0) {  // nothing to hand out
        ++i;
        continue;
      }
      const uint64_t from = ranges[i].offset_in_chunk + done;
      uint64_t length = std::min(ranges[i].length - done, buffer.size() - used);
      if (done + length < ranges[i].length) {
        const uint64_t cut = (from + length) / unit * unit;
        if (cut <= from) break;  // its next block does not fit: the next group starts with it
        length = cut - from;
      }
      group.push_back({from, length, buffer.data() + used});
      used += length;
      done += length;
      if (done == ranges[i].length) ++i, done = 0;
    }
    if (verify) {
      stats_.bytes_read +=
          ReadVerifiedBlocks(file, chunk, BlockLayout::Uniform(chunk.length, chunk.block_size),
                             sums, seed, group, false, what);
    } else {
      for (const ReadRun& run : group) {
        file.Read(chunk.offset + run.offset_in_chunk, std::span(run.dst, run.length));
        stats_.bytes_read += run.length;
      }
    }
    for (const ReadRun& run : group) consume(run.offset_in_chunk, std::span(run.dst, run.length));
  }
  ++(verify ? stats_.chunks_verified : stats_.chunks_unverified);
}

// Version 4: the ranges cut at unit ends (block_layout.h: groups of rows, or
// tiles of a long row), units gathered into pieces of about `piece_bytes`
// (a unit is never split across pieces, so no tile is read twice), each
// read, verified and handed out.
void NativeReader::StreamTiles(const RandomAccessFile& file, const StoredTensor& tensor,
                               const StoredChunk& chunk, std::span<const ReadRun> ranges,
                               std::span<const uint64_t> sums, uint64_t seed, uint64_t piece_bytes,
                               const ConsumeBytes& consume, const Describe& what) {
  ChunkLayouts::Chunk own;
  const BlockLayout& layout = Layout(tensor, chunk, own).layout;
  std::vector<ReadRun> group;
  std::vector<uint64_t> units;  // each group run's unit end
  std::vector<std::byte> buffer;
  auto flush = [&] {
    uint64_t used = 0;
    for (const ReadRun& run : group) used += run.length;
    if (buffer.size() < used) buffer.resize(used);
    used = 0;
    for (ReadRun& run : group) {
      run.dst = buffer.data() + used;
      used += run.length;
    }
    stats_.bytes_read += ReadVerifiedBlocks(file, chunk, layout, sums, seed, group, false, what);
    for (const ReadRun& run : group) consume(run.offset_in_chunk, std::span(run.dst, run.length));
    group.clear();
    units.clear();
  };
  uint64_t bytes = 0;
  for (const ReadRun& range : ranges) {
    for (uint64_t at = range.offset_in_chunk, end = at + range.length; at < end;) {
      const uint64_t unit = layout.UnitEnd(at, piece_bytes);
      const uint64_t stop = std::min(end, unit);
      if (bytes >= piece_bytes && !units.empty() && units.back() != unit) {
        flush();
        bytes = 0;
      }
      group.push_back({at, stop - at, nullptr});
      units.push_back(unit);
      bytes += stop - at;
      at = stop;
    }
  }
  if (!group.empty()) flush();
}

void NativeReader::CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) {
  files_.Open(chunk.file, chunk.offset, chunk.length + SumsBytes(chunk),
              [&] { return ChunkName(tensor, chunk); });
}

std::string NativeReader::ReadObject(const StoredObject& object) {
  const Describe what = [&] { return fmt::format("object '{}'", object.unique_key); };
  const RandomAccessFile& file = files_.Open(object.file, object.offset, object.length, what);
  std::string payload(object.length, '\0');
  std::span<std::byte> bytes = std::as_writable_bytes(std::span(payload.data(), payload.size()));
  file.Read(object.offset, bytes);
  stats_.bytes_read += object.length;
  if (object.checksum) {
    // Version 2 binds the checksum to the object's unique key.
    const uint64_t actual = metadata_->format_version >= 2
                                ? Checksum(bytes, ObjectBindingSeed(object.unique_key))
                                : Checksum(bytes);
    VerifyChecksum(actual, *object.checksum, file, what);
  }
  return payload;
}

}  // namespace distckpt
