#include "format/block_reads.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "format/block_checksums.h"

namespace distckpt {

// Hashed right after the read, while in the core's L2: 256 KiB windows load
// 16 and 64 MiB chunks 5-8% faster than 1 MiB ones (bench/README.md).
constexpr uint64_t kWindowBytes = 256 << 10;

uint64_t ReadCheckedBlocks(
    const RandomAccessFile& file, uint64_t base, uint64_t length, uint64_t block,
    std::span<const ReadRun> runs, bool all,
    const std::function<void(uint64_t first, std::span<const std::byte> bytes)>& check) {
  // Touched block ranges [first, last), merged.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (all) {
    ranges.emplace_back(0, (length + block - 1) / block);
  } else {
    for (const ReadRun& run : runs) {
      if (run.length == 0) continue;
      const uint64_t first = run.offset_in_chunk / block;
      const uint64_t last = (run.offset_in_chunk + run.length - 1) / block + 1;
      if (!ranges.empty() && first <= ranges.back().second) {
        ranges.back().second = std::max(ranges.back().second, last);
      } else {
        ranges.emplace_back(first, last);
      }
    }
  }
  const uint64_t window_blocks = std::max<uint64_t>(1, kWindowBytes / block);
  std::vector<std::pair<uint64_t, uint64_t>> hint;  // the reads below, in order
  for (const auto& [first, last] : ranges) {
    const uint64_t start = first * block, end = std::min(last * block, length);
    if (start < end) hint.emplace_back(base + start, end - start);
  }
  file.WillRead(hint);
  std::vector<std::byte> scratch;
  uint64_t bytes_read = 0;
  size_t r = 0;  // first run that may reach into the current window
  for (const auto& [first, last] : ranges) {
    for (uint64_t w = first; w < last; w += window_blocks) {
      const uint64_t start = w * block;
      const uint64_t end = std::min(std::min(last, w + window_blocks) * block, length);
      while (r < runs.size() && runs[r].offset_in_chunk + runs[r].length <= start) ++r;
      std::byte* buffer;
      const bool direct = r < runs.size() && runs[r].offset_in_chunk <= start &&
                          runs[r].offset_in_chunk + runs[r].length >= end;
      if (direct) {
        buffer = runs[r].dst + (start - runs[r].offset_in_chunk);
      } else {
        scratch.resize(end - start);
        buffer = scratch.data();
      }
      file.Read(base + start, std::span(buffer, end - start));
      bytes_read += end - start;
      check(w, std::span(buffer, end - start));
      if (direct) continue;
      for (size_t k = r; k < runs.size() && runs[k].offset_in_chunk < end; ++k) {
        const uint64_t lo = std::max(start, runs[k].offset_in_chunk);
        const uint64_t hi = std::min(end, runs[k].offset_in_chunk + runs[k].length);
        if (lo < hi) {
          std::memcpy(runs[k].dst + (lo - runs[k].offset_in_chunk), buffer + (lo - start), hi - lo);
        }
      }
    }
  }
  return bytes_read;
}

}  // namespace distckpt

namespace distckpt {
namespace {

using Range = WindowBytes::Range;

}  // namespace

const std::byte* WindowBytes::operator()(uint64_t offset) const {
  if (ranges_.size() == 1) return buffer_ + (offset - ranges_[0].begin);
  const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), offset,
                                   [](uint64_t o, const Range& x) { return o < x.begin; }) -
                  1;
  return buffer_ + it->at + (offset - it->begin);
}

void CheckTiles(const BlockLayout& layout, std::span<const std::byte> bytes,
                std::span<const uint64_t> sums, uint64_t seed,
                const std::function<void(uint64_t tile, uint64_t actual)>& mismatch) {
  std::vector<std::byte> scratch;
  auto at = [&](uint64_t offset) { return bytes.data() + offset; };
  for (uint64_t t = 0; t < layout.tiles(); ++t) {
    const uint64_t actual = TileChecksum(layout, t, BlockSeed(seed, t), at, scratch);
    if (actual != sums[t]) mismatch(t, actual);
  }
}

uint64_t ReadCheckedTiles(const RandomAccessFile& file, uint64_t base, const BlockLayout& layout,
                          std::span<const ReadRun> runs, bool all, std::span<const uint64_t> sums,
                          uint64_t seed,
                          const std::function<void(uint64_t tile, uint64_t actual)>& mismatch) {
  std::vector<std::byte> scratch;
  return ReadCheckedTiles(
      file, base, layout, runs, all, [&](std::span<const uint64_t> tiles, const WindowBytes& at) {
        for (uint64_t t : tiles) {
          const uint64_t actual = TileChecksum(layout, t, BlockSeed(seed, t), at, scratch);
          if (actual != sums[t]) mismatch(t, actual);
        }
      });
}

uint64_t ReadCheckedTiles(
    const RandomAccessFile& file, uint64_t base, const BlockLayout& layout,
    std::span<const ReadRun> runs, bool all,
    const std::function<void(std::span<const uint64_t> tiles, const WindowBytes& at)>& check) {
  std::vector<std::pair<uint64_t, uint64_t>> touched;
  if (all) {
    touched.emplace_back(0, layout.tiles());
  } else {
    touched = layout.Touched(runs);
  }
  // A window: pieces [j0, j1) of groups, in tile order.
  struct Segment {
    uint64_t group, j0, j1;
  };
  std::vector<Segment> segments;
  std::vector<uint64_t> batch;  // their tiles
  std::vector<Range> ranges;
  std::vector<std::byte> scratch;
  uint64_t bytes_read = 0;
  size_t r = 0;  // first run that may reach into the current batch
  // A first pass over the windows only collects their reads (file.WillRead:
  // a store fetches ahead while the windows before are checked).
  std::vector<std::pair<uint64_t, uint64_t>> planned;
  bool planning = true;
  auto add = [&](uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return;
    if (!ranges.empty() && ranges.back().end == offset) {
      ranges.back().end += bytes;
    } else {
      ranges.push_back({offset, offset + bytes, 0});
    }
  };
  auto process = [&] {
    // The window's byte ranges, coalesced: a group's rows in order, so
    // sorted, unless a group holds two segments whose tiles are not
    // contiguous (a partial read of separate pieces of the same rows).
    ranges.clear();
    bool sorted = true;
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& s = segments[i];
      if (i > 0 && segments[i - 1].group == s.group && !layout.contiguous()) sorted = false;
      layout.ForEachGroupPart(s.group, s.j0, s.j1, add);
    }
    if (!sorted) {
      std::sort(ranges.begin(), ranges.end(),
                [](const Range& a, const Range& b) { return a.begin < b.begin; });
      size_t n = 0;
      for (const Range& range : ranges) {
        if (n > 0 && ranges[n - 1].end == range.begin) {
          ranges[n - 1].end = range.end;
        } else {
          ranges[n++] = range;
        }
      }
      ranges.resize(n);
    }
    uint64_t total = 0;
    for (Range& range : ranges) {
      range.at = total;
      total += range.end - range.begin;
    }
    if (ranges.empty()) return;
    if (planning) {
      for (const Range& range : ranges) {
        if (!planned.empty() &&
            planned.back().first + planned.back().second == base + range.begin) {
          planned.back().second += range.end - range.begin;
        } else {
          planned.emplace_back(base + range.begin, range.end - range.begin);
        }
      }
      return;
    }
    while (r < runs.size() && runs[r].offset_in_chunk + runs[r].length <= ranges[0].begin) ++r;
    const bool direct = ranges.size() == 1 && r < runs.size() &&
                        runs[r].offset_in_chunk <= ranges[0].begin &&
                        runs[r].offset_in_chunk + runs[r].length >= ranges[0].end;
    std::byte* buffer;
    if (direct) {
      buffer = runs[r].dst + (ranges[0].begin - runs[r].offset_in_chunk);
    } else {
      if (scratch.size() < total) scratch.resize(total);
      buffer = scratch.data();
    }
    for (const Range& range : ranges) {
      file.Read(base + range.begin, std::span(buffer + range.at, range.end - range.begin));
    }
    bytes_read += total;
    check(batch, WindowBytes(buffer, ranges));
    if (direct) return;
    // Copy out: every run's bytes inside the ranges (runs and ranges sorted).
    size_t i = 0;
    for (size_t k = r; k < runs.size() && runs[k].offset_in_chunk < ranges.back().end; ++k) {
      const uint64_t a = runs[k].offset_in_chunk, b = a + runs[k].length;
      while (i < ranges.size() && ranges[i].end <= a) ++i;
      for (size_t q = i; q < ranges.size() && ranges[q].begin < b; ++q) {
        const uint64_t lo = std::max(a, ranges[q].begin), hi = std::min(b, ranges[q].end);
        if (lo < hi)
          std::memcpy(runs[k].dst + (lo - a), buffer + ranges[q].at + (lo - ranges[q].begin),
                      hi - lo);
      }
    }
  };
  // Windows of about kWindowBytes, cut between tiles where tiles are
  // contiguous, else between groups (a group's tiles share its rows).
  const uint64_t m = layout.pieces();
  auto windows = [&] {
    uint64_t batch_bytes = 0;
    for (const auto& [first, last] : touched) {
      for (uint64_t t = first; t < last;) {
        const auto [g, j0] = layout.GroupPiece(t);
        // Pieces [j0, j1) of group g, tiles [t, t + j1 - j0): up to `last`.
        const uint64_t j1 = layout.contiguous() ? j0 + 1 : std::min(m, j0 + (last - t));
        if (batch_bytes >= kWindowBytes && (j0 == 0 || layout.contiguous())) {
          process();
          segments.clear();
          batch.clear();
          batch_bytes = 0;
        }
        segments.push_back({g, j0, j1});
        layout.ForEachGroupPart(g, j0, j1, [&](uint64_t, uint64_t bytes) { batch_bytes += bytes; });
        for (const uint64_t end = t + (j1 - j0); t < end; ++t) batch.push_back(t);
      }
    }
    process();
    segments.clear();
    batch.clear();
  };
  windows();
  file.WillRead(planned);
  planning = false;
  windows();
  return bytes_read;
}

}  // namespace distckpt
