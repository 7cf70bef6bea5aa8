// N-d boxes (offset + shape, in elements) and the byte runs a box occupies
// inside a row-major chunk.
//
// A Box with an axis of size 0 is empty. All functions require boxes of equal
// rank and throw CheckpointError(kInvalidArgument) otherwise.
//
// Thread-safety: value types and pure functions.
#ifndef DISTCKPT_CORE_BOX_H_
#define DISTCKPT_CORE_BOX_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace distckpt {

using Shape = std::vector<int64_t>;

int64_t Volume(const Shape& shape);             // product; 1 for a 0-d shape
std::string ShapeToString(const Shape& shape);  // "(2, 3)" like a Python tuple; "(4,)" for 1-d
void AppendShape(const Shape& shape, std::string& out);  // ShapeToString(shape) appended

struct Box {
  Shape offset;
  Shape shape;

  size_t rank() const { return shape.size(); }
  int64_t volume() const { return Volume(shape); }
  bool empty() const { return volume() == 0; }
  friend bool operator==(const Box&, const Box&) = default;
  std::string ToString() const;  // "[0:2, 4:8]"
};

// The common part of two boxes; nullopt when they do not overlap (or either is empty).
std::optional<Box> Intersect(const Box& a, const Box& b);
// True iff `inner` lies within `outer` (an empty inner box is contained anywhere).
bool Contains(const Box& outer, const Box& inner);
// Contains(Box{zeros, shape}, box), false for another rank; builds no box.
bool InsideShape(const Box& box, const Shape& shape);

// Half-open range [start, stop) of a row-major flattening.
struct FlatRange {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t size() const { return stop - start; }
  friend bool operator==(const FlatRange&, const FlatRange&) = default;
};

// The boxes, at most 2 * rank - 1 of them and in row-major order, whose
// union is exactly the elements [range.start, range.stop) of `box`'s
// row-major flattening (none for an empty range). Throws
// CheckpointError(kInvalidArgument) for a range outside the box.
std::vector<Box> FlatRangeBoxes(const Box& box, const FlatRange& range);

struct ByteRun {
  uint64_t offset = 0;  // from the start of the chunk
  uint64_t length = 0;
  friend bool operator==(const ByteRun&, const ByteRun&) = default;
};

// The minimal list of contiguous byte runs, in increasing offset order, that
// `sub` (in the same global coordinates as `chunk`, contained in it) occupies
// inside the row-major bytes of `chunk`. Adjacent runs are merged.
std::vector<ByteRun> SubBoxRuns(const Box& chunk, const Box& sub, size_t elem_size);

// One contiguous piece of a copy between two row-major layouts: `count`
// elements starting at linear element index `a_index` in layout a and
// `b_index` in layout b.
struct CopyRun {
  int64_t a_index = 0;
  int64_t b_index = 0;
  int64_t count = 0;
  friend bool operator==(const CopyRun&, const CopyRun&) = default;
};

// Calls fn for every maximal run of `region` (contained in boxes a and b) that
// is contiguous in both layouts, in row-major order of `region`. When a
// FlatRange is given for a side, that side's buffer holds only the elements
// [start, stop) of the box's row-major flattening: runs are clipped to it and
// its indices are relative to `start` (pieces outside it are skipped).
void ForEachCopyRun(const Box& a, const std::optional<FlatRange>& a_flat, const Box& b,
                    const std::optional<FlatRange>& b_flat, const Box& region,
                    const std::function<void(const CopyRun&)>& fn);

}  // namespace distckpt

#endif  // DISTCKPT_CORE_BOX_H_
