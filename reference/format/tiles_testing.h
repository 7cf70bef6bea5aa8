// Test helper of the tile tests (block_layout_test, native_reader_test,
// dcp_format_test): the runs a resharded read of a 2-d chunk, flat or not,
// makes. For *_test.cc files only.
#ifndef DISTCKPT_FORMAT_TILES_TESTING_H_
#define DISTCKPT_FORMAT_TILES_TESTING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "format/checkpoint_metadata.h"
#include "format/format.h"

namespace distckpt {

// The runs of a read of global columns [c0, c1) of every row of `chunk`'s
// 2-d box, of elements of `element` bytes, clipped to its flat range (if
// any), as offsets into its payload; the run of row r starting at global
// column c lands at dst(r, c) (nullptr when not given).
inline std::vector<ReadRun> ColumnRunsOf(
    const StoredChunk& chunk, int64_t c0, int64_t c1, uint64_t element,
    const std::function<std::byte*(int64_t row, int64_t column)>& dst = nullptr) {
  const int64_t rows = chunk.box.shape[0], columns = chunk.box.shape[1];
  const int64_t offset = chunk.box.offset[1];
  const int64_t start = chunk.flat ? chunk.flat->start : 0;
  const int64_t stop = chunk.flat ? chunk.flat->stop : rows * columns;
  const int64_t from = std::max(c0, offset) - offset, to = std::min(c1, offset + columns) - offset;
  std::vector<ReadRun> runs;
  for (int64_t r = 0; r < rows && from < to; ++r) {
    const int64_t a = std::max(r * columns + from, start), b = std::min(r * columns + to, stop);
    if (a >= b) continue;
    runs.push_back({static_cast<uint64_t>(a - start) * element,
                    static_cast<uint64_t>(b - a) * element,
                    dst ? dst(r, offset + a - r * columns) : nullptr});
  }
  return runs;
}

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_TILES_TESTING_H_
