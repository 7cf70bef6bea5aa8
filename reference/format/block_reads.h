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

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_BLOCK_READS_H_
