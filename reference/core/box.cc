// Box algebra and the enumeration of contiguous runs of a region inside
// row-major layouts. Run enumeration does constant work per run (no
// per-element work, no allocation per run).
#include "core/box.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/error.h"

namespace distckpt {

namespace {

// offset + extent without overflow: boxes come from files, and a damaged
// offset near INT64_MAX must not overflow (undefined behaviour).
__int128 End(int64_t offset, int64_t extent) { return static_cast<__int128>(offset) + extent; }

void CheckBox(const Box& box) {
  if (box.offset.size() != box.shape.size()) {
    Fail(ErrorKind::kInvalidArgument, "box has {} offsets but {} extents", box.offset.size(),
         box.shape.size());
  }
}

void CheckSameRank(const Box& a, const Box& b) {
  CheckBox(a);
  CheckBox(b);
  if (a.rank() != b.rank()) {
    Fail(ErrorKind::kInvalidArgument, "boxes {} and {} differ in rank", a.ToString(), b.ToString());
  }
}

void CheckFlatRange(const Box& box, const std::optional<FlatRange>& flat) {
  if (flat && (flat->start < 0 || flat->start > flat->stop || flat->stop > box.volume())) {
    Fail(ErrorKind::kInvalidArgument, "flat range [{}, {}) is outside box {} of {} elements",
         flat->start, flat->stop, box.ToString(), box.volume());
  }
}

// The number of leading axes over which the runs of `region` inside `box`
// must be enumerated: on every later axis the region spans the box, so
// consecutive rows there are adjacent in the box's row-major order.
size_t OuterAxes(const Box& region, const Box& box) {
  size_t outer = region.rank() == 0 ? 0 : region.rank() - 1;
  while (outer > 0 && region.shape[outer] == box.shape[outer]) --outer;
  return outer;
}

// One side of a copy: the layout's element strides on the outer axes, the
// index of the region's first element, and the optional flat window.
struct Side {
  std::vector<int64_t> strides;
  int64_t base = 0;
  bool flat = false;
  int64_t start = 0;
  int64_t stop = 0;

  Side(const Box& box, const std::optional<FlatRange>& range, const Box& region, size_t outer) {
    strides.resize(outer);
    int64_t stride = 1;
    for (size_t axis = box.rank(); axis-- > 0;) {
      if (axis < outer) strides[axis] = stride;
      base += (region.offset[axis] - box.offset[axis]) * stride;
      stride *= box.shape[axis];
    }
    if (range) {
      flat = true;
      start = range->start;
      stop = range->stop;
    }
  }

  // The linear number of the first run (over the outer axes of `region`)
  // that ends after `start`: runs start at increasing indices in row-major
  // order, and each stride exceeds the span of all later axes, so the last
  // run starting at or before start - count is found greedily, axis by axis.
  int64_t FirstRun(const Shape& outer_shape, int64_t count) const {
    if (!flat || start - count < base) return 0;
    int64_t remaining = start - count - base;
    int64_t run = 0;
    for (size_t axis = 0; axis < outer_shape.size(); ++axis) {
      const int64_t index = std::min(outer_shape[axis] - 1, remaining / strides[axis]);
      remaining -= index * strides[axis];
      run = run * outer_shape[axis] + index;
    }
    return run + 1;
  }
};

// FlatRangeBoxes below axis `axis`: `box` has extent 1 on the axes before it.
void AppendFlatRangeBoxes(const Box& box, size_t axis, int64_t start, int64_t stop,
                          std::vector<Box>& out) {
  if (start >= stop) return;
  int64_t inner = 1;  // elements per index of `axis`
  for (size_t a = axis + 1; a < box.rank(); ++a) inner *= box.shape[a];
  if (axis == box.rank() || (start == 0 && stop == box.shape[axis] * inner)) {
    out.push_back(box);
    return;
  }
  auto slab = [&](int64_t from, int64_t to) {  // indices [from, to) of `axis`
    Box b = box;
    b.offset[axis] += from;
    b.shape[axis] = to - from;
    return b;
  };
  int64_t first = start / inner;
  const int64_t last = stop / inner;  // the partial slab at the end, if any
  if (start % inner != 0) {           // the partial slab at the start
    const int64_t end = std::min(stop, (first + 1) * inner);
    AppendFlatRangeBoxes(slab(first, first + 1), axis + 1, start - first * inner,
                         end - first * inner, out);
    if (end == stop) return;
    ++first;
  }
  if (first < last) out.push_back(slab(first, last));
  if (stop % inner != 0) {
    AppendFlatRangeBoxes(slab(last, last + 1), axis + 1, 0, stop - last * inner, out);
  }
}

}  // namespace

std::vector<Box> FlatRangeBoxes(const Box& box, const FlatRange& range) {
  CheckBox(box);
  CheckFlatRange(box, range);
  std::vector<Box> boxes;
  AppendFlatRangeBoxes(box, 0, range.start, range.stop, boxes);
  return boxes;
}

int64_t Volume(const Shape& shape) {
  int64_t volume = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      Fail(ErrorKind::kInvalidArgument, "negative extent in shape {}", ShapeToString(shape));
    }
    if (__builtin_mul_overflow(volume, extent, &volume)) {
      Fail(ErrorKind::kInvalidArgument, "shape {} has too many elements", ShapeToString(shape));
    }
  }
  return volume;
}

void AppendShape(const Shape& shape, std::string& out) {
  out += '(';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    char digits[24];
    out.append(digits, std::to_chars(digits, digits + sizeof(digits), shape[i]).ptr);
  }
  out += shape.size() == 1 ? ",)" : ")";
}

std::string ShapeToString(const Shape& shape) {
  std::string out;
  AppendShape(shape, out);
  return out;
}

std::string Box::ToString() const {
  std::string out = "[";
  for (size_t axis = 0; axis < shape.size() && axis < offset.size(); ++axis) {
    if (axis > 0) out += ", ";
    int64_t end;
    if (__builtin_add_overflow(offset[axis], shape[axis], &end)) {
      out += fmt::format("{}:{}+{}", offset[axis], offset[axis], shape[axis]);  // no overflow
    } else {
      out += fmt::format("{}:{}", offset[axis], end);
    }
  }
  return out + "]";
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  CheckSameRank(a, b);
  Box common;
  common.offset.resize(a.rank());
  common.shape.resize(a.rank());
  for (size_t axis = 0; axis < a.rank(); ++axis) {
    const int64_t lo = std::max(a.offset[axis], b.offset[axis]);
    const int64_t hi = static_cast<int64_t>(
        std::min({End(a.offset[axis], a.shape[axis]), End(b.offset[axis], b.shape[axis]),
                  static_cast<__int128>(std::numeric_limits<int64_t>::max())}));
    if (hi <= lo) return std::nullopt;
    common.offset[axis] = lo;
    common.shape[axis] = hi - lo;
  }
  return common;
}

bool Contains(const Box& outer, const Box& inner) {
  CheckSameRank(outer, inner);
  if (inner.empty()) return true;
  for (size_t axis = 0; axis < outer.rank(); ++axis) {
    if (inner.offset[axis] < outer.offset[axis] ||
        End(inner.offset[axis], inner.shape[axis]) > End(outer.offset[axis], outer.shape[axis])) {
      return false;
    }
  }
  return true;
}

bool InsideShape(const Box& box, const Shape& shape) {
  if (box.rank() != shape.size() || box.offset.size() != box.rank()) return false;
  if (box.empty()) return true;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (box.offset[axis] < 0 || End(box.offset[axis], box.shape[axis]) > shape[axis]) return false;
  }
  return true;
}

std::vector<ByteRun> SubBoxRuns(const Box& chunk, const Box& sub, size_t elem_size) {
  // The runs of `sub` contiguous in both the chunk and `sub` itself: `sub` is
  // contiguous in its own layout, so these are exactly its runs in the chunk.
  // They are maximal, hence never adjacent to each other.
  std::vector<ByteRun> runs;
  ForEachCopyRun(chunk, std::nullopt, sub, std::nullopt, sub, [&](const CopyRun& run) {
    runs.push_back({static_cast<uint64_t>(run.a_index) * elem_size,
                    static_cast<uint64_t>(run.count) * elem_size});
  });
  return runs;
}

void ForEachCopyRun(const Box& a, const std::optional<FlatRange>& a_flat, const Box& b,
                    const std::optional<FlatRange>& b_flat, const Box& region,
                    const std::function<void(const CopyRun&)>& fn) {
  CheckSameRank(a, region);
  CheckSameRank(b, region);
  CheckFlatRange(a, a_flat);
  CheckFlatRange(b, b_flat);
  if (!Contains(a, region) || !Contains(b, region)) {
    Fail(ErrorKind::kInvalidArgument, "copy region {} is not inside both {} and {}",
         region.ToString(), a.ToString(), b.ToString());
  }
  if (region.empty()) return;

  // Each run covers the axes from `outer` on; runs are enumerated over the
  // outer axes with an odometer that updates both sides' indices in place.
  const size_t outer = std::max(OuterAxes(region, a), OuterAxes(region, b));
  const Shape outer_shape(region.shape.begin(), region.shape.begin() + outer);
  int64_t count = 1;
  for (size_t axis = outer; axis < region.rank(); ++axis) count *= region.shape[axis];
  const Side sa(a, a_flat, region, outer);
  const Side sb(b, b_flat, region, outer);

  const int64_t num_runs = Volume(outer_shape);
  const int64_t first = std::max(sa.FirstRun(outer_shape, count), sb.FirstRun(outer_shape, count));
  if (first >= num_runs) return;
  std::vector<int64_t> index(outer);
  int64_t a_pos = sa.base;
  int64_t b_pos = sb.base;
  for (size_t axis = outer, rest = static_cast<size_t>(first); axis-- > 0;) {
    index[axis] = static_cast<int64_t>(rest) % outer_shape[axis];
    rest /= static_cast<size_t>(outer_shape[axis]);
    a_pos += index[axis] * sa.strides[axis];
    b_pos += index[axis] * sb.strides[axis];
  }

  for (int64_t run = first; run < num_runs; ++run) {
    if ((sa.flat && a_pos >= sa.stop) || (sb.flat && b_pos >= sb.stop)) return;
    // Clip [0, count) of this run to both flat windows.
    int64_t lo = 0;
    int64_t hi = count;
    if (sa.flat) {
      lo = std::max(lo, sa.start - a_pos);
      hi = std::min(hi, sa.stop - a_pos);
    }
    if (sb.flat) {
      lo = std::max(lo, sb.start - b_pos);
      hi = std::min(hi, sb.stop - b_pos);
    }
    if (lo < hi) {
      fn(CopyRun{a_pos + lo - (sa.flat ? sa.start : 0), b_pos + lo - (sb.flat ? sb.start : 0),
                 hi - lo});
    }
    for (size_t axis = outer; axis-- > 0;) {
      a_pos += sa.strides[axis];
      b_pos += sb.strides[axis];
      if (++index[axis] < outer_shape[axis]) break;
      index[axis] = 0;
      a_pos -= outer_shape[axis] * sa.strides[axis];
      b_pos -= outer_shape[axis] * sb.strides[axis];
    }
  }
}

}  // namespace distckpt
