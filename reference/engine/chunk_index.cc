#include "engine/chunk_index.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace distckpt {

namespace {

constexpr size_t kLeafChunks = 8;

// offset + extent, clamped to INT64_MAX as Intersect clamps it.
int64_t ClampedEnd(int64_t offset, int64_t extent) {
  return static_cast<int64_t>(std::min(static_cast<__int128>(offset) + extent,
                                       static_cast<__int128>(std::numeric_limits<int64_t>::max())));
}

// [lo, end) and [qlo, qend) (both non-empty) overlap on every axis.
bool Overlaps(const int64_t* lo, const int64_t* end, const int64_t* qlo, const int64_t* qend,
              size_t rank) {
  for (size_t a = 0; a < rank; ++a) {
    if (lo[a] >= qend[a] || qlo[a] >= end[a]) return false;
  }
  return true;
}

}  // namespace

ChunkIndex::ChunkIndex(const StoredTensor& stored) : rank_(stored.global_shape.size()) {
  const size_t n = stored.chunks.size();
  lo_.resize(n * rank_);
  end_.resize(n * rank_);
  for (size_t i = 0; i < n; ++i) {
    const Box& box = stored.chunks[i].box;
    if (box.shape.size() != rank_ || box.offset.size() != rank_) {
      always_.push_back(i);
      continue;
    }
    bool empty = false;
    for (size_t a = 0; a < rank_; ++a) {
      lo_[i * rank_ + a] = box.offset[a];
      end_[i * rank_ + a] = ClampedEnd(box.offset[a], box.shape[a]);
      empty |= end_[i * rank_ + a] <= box.offset[a];
    }
    if (!empty) order_.push_back(i);  // an empty box intersects nothing
  }
  if (!order_.empty()) Build(0, order_.size());
}

size_t ChunkIndex::Build(size_t begin, size_t end) {
  const size_t node = nodes_.size();
  nodes_.push_back(Node{begin, end, 0});
  node_lo_.resize(node_lo_.size() + rank_, std::numeric_limits<int64_t>::max());
  node_end_.resize(node_end_.size() + rank_, std::numeric_limits<int64_t>::min());
  // Bounds, and per axis how many chunk extents the spread of offsets spans.
  std::vector<int64_t> min_lo(rank_, std::numeric_limits<int64_t>::max());
  std::vector<int64_t> max_lo(rank_, std::numeric_limits<int64_t>::min());
  std::vector<double> extents(rank_, 0);
  for (size_t p = begin; p < end; ++p) {
    const size_t c = order_[p];
    for (size_t a = 0; a < rank_; ++a) {
      const int64_t lo = lo_[c * rank_ + a], e = end_[c * rank_ + a];
      node_lo_[node * rank_ + a] = std::min(node_lo_[node * rank_ + a], lo);
      node_end_[node * rank_ + a] = std::max(node_end_[node * rank_ + a], e);
      min_lo[a] = std::min(min_lo[a], lo);
      max_lo[a] = std::max(max_lo[a], lo);
      extents[a] += static_cast<double>(e - lo);
    }
  }
  if (end - begin <= kLeafChunks) return node;
  size_t axis = rank_;
  double best = 0;
  for (size_t a = 0; a < rank_; ++a) {
    const double positions =
        (static_cast<double>(max_lo[a]) - static_cast<double>(min_lo[a])) * static_cast<double>(end - begin) / extents[a];
    if (positions > best) {
      best = positions;
      axis = a;
    }
  }
  if (axis == rank_) return node;  // all chunks start at one point: nothing to split on
  const size_t mid = begin + (end - begin) / 2;
  std::nth_element(order_.begin() + begin, order_.begin() + mid, order_.begin() + end,
                   [&](size_t x, size_t y) { return lo_[x * rank_ + axis] < lo_[y * rank_ + axis]; });
  Build(begin, mid);
  nodes_[node].right = Build(mid, end);
  return node;
}

std::vector<size_t> ChunkIndex::Overlapping(const Box& box) const {
  if (box.shape.size() != rank_ || box.offset.size() != rank_) {
    Fail(ErrorKind::kInvalidArgument, "chunk index of rank {} queried with box {}", rank_,
         box.ToString());
  }
  std::vector<size_t> out = always_;
  std::vector<int64_t> qend(rank_);
  for (size_t a = 0; a < rank_; ++a) {
    qend[a] = ClampedEnd(box.offset[a], box.shape[a]);
    if (qend[a] <= box.offset[a]) return out;  // an empty box intersects nothing
  }
  const int64_t* qlo = box.offset.data();
  std::vector<size_t> stack;
  if (!nodes_.empty()) stack.push_back(0);
  while (!stack.empty()) {
    const size_t n = stack.back();
    stack.pop_back();
    if (!Overlaps(node_lo_.data() + n * rank_, node_end_.data() + n * rank_, qlo, qend.data(), rank_)) continue;
    const Node& node = nodes_[n];
    if (node.right != 0) {
      stack.push_back(node.right);
      stack.push_back(n + 1);
      continue;
    }
    for (size_t p = node.begin; p < node.end; ++p) {
      const size_t c = order_[p];
      if (Overlaps(lo_.data() + c * rank_, end_.data() + c * rank_, qlo, qend.data(), rank_)) out.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace distckpt
