// Verified partial reads of a payload that carries one checksum per block
// (native format version 2, DCP items with distckpt's item index): the
// blocks the runs touch are read whole, in windows of up to 256 KiB (straight
// into the destination where one run covers a window, else into a scratch
// buffer the runs are copied out of), and every block is checked before any
// of its bytes is handed out.
//
// Thread-safety: reentrant.
#ifndef DISTCKPT_FORMAT_BLOCK_READS_H_
#define DISTCKPT_FORMAT_BLOCK_READS_H_

#include <cstdint>
#include <functional>
#include <span>

#include "format/block_layout.h"
#include "format/format.h"
#include "io/env.h"

namespace distckpt {

// Reads the blocks of the `length`-byte payload at byte `base` of `file`
// that `runs` (sorted, disjoint, in payload offsets) touch, every block when
// `all`, into the runs. `check(first, bytes)` verifies the blocks read
// together, `bytes` holding block `first` and those after it (the last may
// be short: the payload's end), and throws on a mismatch: called once per
// window, not per block (with a call per 4 KiB block, the hashing of a
// 16 MiB chunk took twice as long as the same hashes made in one loop, on
// data already in the cache: bench/README.md, sixth round).
// Returns the bytes read.
uint64_t ReadCheckedBlocks(
    const RandomAccessFile& file, uint64_t base, uint64_t length, uint64_t block_size,
    std::span<const ReadRun> runs, bool all,
    const std::function<void(uint64_t first, std::span<const std::byte> bytes)>& check);

// Where a window's payload bytes are in memory: at(offset) is the address
// of payload byte `offset` (one the window read).
class WindowBytes {
 public:
  struct Range {
    uint64_t begin, end, at;  // payload bytes [begin, end), at buffer + at
  };
  WindowBytes(const std::byte* buffer, std::span<const Range> ranges)
      : buffer_(buffer), ranges_(ranges) {}
  const std::byte* operator()(uint64_t offset) const;

 private:
  const std::byte* buffer_;
  std::span<const Range> ranges_;
};

// The same for blocks as `layout` cuts them (native versions 2 and 3,
// DCP items: uniform; native version 4: tiles, block_layout.h): reads the
// tiles `runs` touch (every tile when `all`), in windows of about 256 KiB of
// whole tiles (each tile's parts coalesced into as few reads as the bytes
// allow; straight into the destination where one run covers a window's one
// range), and calls `check(tiles, at)` for each window's tiles before any of
// their bytes is handed out; it throws on a mismatch. Returns the bytes read.
uint64_t ReadCheckedTiles(
    const RandomAccessFile& file, uint64_t base, const BlockLayout& layout,
    std::span<const ReadRun> runs, bool all,
    const std::function<void(std::span<const uint64_t> tiles, const WindowBytes& at)>& check);
// ReadCheckedTiles checking native tile t against `sums[t]` (TileChecksum
// with BlockSeed(seed, t)); calls `mismatch(t, actual)`, which throws, on
// the first that differs.
uint64_t ReadCheckedTiles(const RandomAccessFile& file, uint64_t base, const BlockLayout& layout,
                          std::span<const ReadRun> runs, bool all, std::span<const uint64_t> sums,
                          uint64_t seed,
                          const std::function<void(uint64_t tile, uint64_t actual)>& mismatch);
// Checks every tile of a payload held whole in `bytes` the same way.
void CheckTiles(const BlockLayout& layout, std::span<const std::byte> bytes,
                std::span<const uint64_t> sums, uint64_t seed,
                const std::function<void(uint64_t tile, uint64_t actual)>& mismatch);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_BLOCK_READS_H_
