// Exact-tiling check of a global box by a set of N-d boxes (the main
// replicas of an unevenly sharded tensor): every box inside the global box,
// no two overlapping, no element left uncovered. Runs in about
// O(n log n + n * a) for n boxes, where a is the number of boxes crossed by a
// sweep hyperplane along the best axis, so 10^5 chunks take milliseconds.
//
// Thread-safety: pure function.
#ifndef DISTCKPT_MAPPING_TILING_H_
#define DISTCKPT_MAPPING_TILING_H_

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "core/box.h"

namespace distckpt {

struct TilingCheck {
  // Up to max_examples of each kind; indices into the checked boxes.
  std::vector<size_t> outside;                      // not contained in the global box
  std::vector<std::pair<size_t, size_t>> overlaps;  // pairs of overlapping boxes
  // Only computed when no boxes overlap: elements covered, and an example
  // uncovered box when that is fewer than the global volume.
  int64_t covered = 0;
  std::optional<Box> gap;

  bool ok() const { return outside.empty() && overlaps.empty() && !gap; }
};

// Empty boxes are ignored. Boxes must have the rank of `global_shape`.
TilingCheck CheckTiling(const Shape& global_shape, const std::vector<Box>& boxes,
                        size_t max_examples);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_TILING_H_
