// A spatial index over the stored chunks of one tensor, so that a load plan
// finds the chunks overlapping a requested box without scanning all n chunks
// of the key for every requested piece (a key of a MoE or distributed-
// optimizer checkpoint can hold 10^5 chunks).
//
// It is a bounding-box hierarchy over the chunks in grid order: each axis is
// cut into cells of the chunks' mean extent there, the chunks are sorted
// (radix sort) by the row-major number of their first cell, the axis of most
// cells outermost, and a balanced binary tree over that order keeps at each
// node the bounds of its chunks, down to leaves of a few chunks. Building is
// O(n) (a pass per 8 bits of the cell number). A query visits O(log n + k)
// nodes when the chunks tile the tensor as a grid of similar extents (as TP,
// PP, EP and DP splits do); uneven chunks make looser bounds and more visits,
// never another answer. It pays when a key serves several requested pieces.
//
// Contract: Overlapping(box) returns, in increasing order, exactly the chunks
// whose box intersects `box` (Intersect(chunk.box, box) has a value: every
// axis overlaps with a positive extent), plus every chunk whose box is
// malformed or of another rank than the tensor, so that the caller meets
// (and reports) them as a scan of all chunks would.
//
// Thread-safety: immutable after construction; concurrent queries are safe.
// It keeps no reference to the StoredTensor.
#ifndef DISTCKPT_ENGINE_CHUNK_INDEX_H_
#define DISTCKPT_ENGINE_CHUNK_INDEX_H_

#include <cstdint>
#include <vector>

#include "core/box.h"
#include "format/checkpoint_metadata.h"

namespace distckpt {

class ChunkIndex {
 public:
  explicit ChunkIndex(const StoredTensor& stored);

  // `box` must have the tensor's rank (that of its global shape).
  std::vector<size_t> Overlapping(const Box& box) const;

 private:
  struct Node {
    size_t begin = 0, end = 0;  // its chunks: order_[begin, end)
    size_t right = 0;           // second child (the first is the next node); 0 for a leaf
  };

  void SortByCell();
  size_t Build(size_t begin, size_t end);  // returns the node

  size_t rank_ = 0;
  std::vector<int64_t> lo_, end_;            // per chunk, rank_ each; end clamped to INT64_MAX
  std::vector<int64_t> node_lo_, node_end_;  // per node, rank_ each
  std::vector<Node> nodes_;                  // pre-order; nodes_[0] is the root
  std::vector<size_t> order_;                // chunk indices with a non-empty box of rank_
  std::vector<size_t> always_;               // malformed or of another rank: always returned
};

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_CHUNK_INDEX_H_
