// Verified partial reads of a payload that carries one checksum per block
// (native format version 2, DCP items with distckpt's item index): the
// blocks the runs touch are read whole, in windows of up to 1 MiB (straight
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
// `all`, into the runs. `check(index, bytes)` verifies block `index` (its
// bytes) and throws on a mismatch. Returns the bytes read.
uint64_t ReadCheckedBlocks(
    const RandomAccessFile& file, uint64_t base, uint64_t length, uint64_t block_size,
    std::span<const ReadRun> runs, bool all,
    const std::function<void(uint64_t index, std::span<const std::byte> bytes)>& check);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_BLOCK_READS_H_
