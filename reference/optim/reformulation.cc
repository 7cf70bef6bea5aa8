#include "optim/reformulation.h"

#include <cmath>

#include "core/error.h"

namespace distckpt {

std::vector<Shape> ReformulatedChunkOffsets(const Shape& ckpt_global_shape,
                                            const Shape& ckpt_fragmentations,
                                            const Shape& app_fragmentations,
                                            const Shape& app_chunk_offset) {
  const size_t n = ckpt_global_shape.size();
  if (ckpt_fragmentations.size() != n || app_fragmentations.size() != n ||
      app_chunk_offset.size() != n) {
    Fail(ErrorKind::kInvalidArgument,
         "reformulation: shape {} with fragmentations {} vs {} and offset {}",
         ShapeToString(ckpt_global_shape), ShapeToString(ckpt_fragmentations),
         ShapeToString(app_fragmentations), ShapeToString(app_chunk_offset));
  }
  Shape local(n);
  std::vector<std::vector<int64_t>> indices(n);
  for (size_t d = 0; d < n; ++d) {
    if (ckpt_fragmentations[d] < 1 || ckpt_global_shape[d] % ckpt_fragmentations[d] != 0) {
      Fail(ErrorKind::kInvalidArgument,
           "reformulation: axis {} of size {} does not split into {} chunks", d,
           ckpt_global_shape[d], ckpt_fragmentations[d]);
    }
    local[d] = ckpt_global_shape[d] / ckpt_fragmentations[d];
    double ratio =
        static_cast<double>(ckpt_fragmentations[d]) / static_cast<double>(app_fragmentations[d]);
    auto first = static_cast<int64_t>(ratio * static_cast<double>(app_chunk_offset[d]));
    auto last =
        static_cast<int64_t>(std::ceil(ratio * static_cast<double>(app_chunk_offset[d] + 1)));
    for (int64_t i = first; i < last; ++i) indices[d].push_back(i);
  }
  std::vector<Shape> offsets{Shape{}};
  for (size_t d = 0; d < n; ++d) {
    std::vector<Shape> next;
    for (const Shape& prefix : offsets) {
      for (int64_t i : indices[d]) {
        Shape o = prefix;
        o.push_back(i * local[d]);
        next.push_back(std::move(o));
      }
    }
    offsets = std::move(next);
  }
  return offsets;
}

}  // namespace distckpt
