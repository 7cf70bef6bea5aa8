#include "engine/chunk_index.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

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
  order_.reserve(n);
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
  if (order_.empty()) return;
  SortByCell();
  Build(0, order_.size());
}

void ChunkIndex::SortByCell() {
  // Per axis: where the chunks start, how far they reach, their mean extent.
  std::vector<int64_t> min_lo(rank_, std::numeric_limits<int64_t>::max());
  std::vector<int64_t> max_end(rank_, std::numeric_limits<int64_t>::min());
  std::vector<double> extent(rank_, 0);
  for (size_t c : order_) {
    const int64_t* lo = lo_.data() + c * rank_;
    const int64_t* end = end_.data() + c * rank_;
    for (size_t a = 0; a < rank_; ++a) {
      min_lo[a] = std::min(min_lo[a], lo[a]);
      max_end[a] = std::max(max_end[a], end[a]);
      extent[a] += static_cast<double>(end[a]) - static_cast<double>(lo[a]);  // no overflow
    }
  }
  // The grid: cells of the mean extent, at most 2^62 per axis. The key of a
  // chunk is the row-major number of its first cell over the axes by
  // decreasing cell count (the most selective outermost), each axis given
  // the bits its cells need while 64 bits last: later axes then lose their
  // low bits, a coarser order for the same index.
  std::vector<double> cells(rank_), per_cell(rank_);
  std::vector<size_t> axes(rank_);
  for (size_t a = 0; a < rank_; ++a) {
    extent[a] /= static_cast<double>(order_.size());
    per_cell[a] = 1 / extent[a];
    cells[a] =
        std::clamp((static_cast<double>(max_end[a]) - static_cast<double>(min_lo[a])) * per_cell[a],
                   1.0, 0x1p62);
    axes[a] = a;
  }
  std::stable_sort(axes.begin(), axes.end(),
                   [&](size_t x, size_t y) { return cells[x] > cells[y]; });
  std::vector<int> bits(rank_), drop(rank_), shift(rank_);
  int key_bits = 0;
  for (size_t a : axes) {
    const int need = std::bit_width(static_cast<uint64_t>(std::ceil(cells[a])) - 1);
    bits[a] = std::min(need, 64 - key_bits);
    drop[a] = need - bits[a];
    key_bits += bits[a];
  }
  int below = key_bits;
  for (size_t a : axes) shift[a] = below -= bits[a];
  std::vector<std::pair<uint64_t, size_t>> keyed(order_.size()), spare(order_.size());
  for (size_t p = 0; p < order_.size(); ++p) {
    const size_t c = order_[p];
    uint64_t key = 0;
    for (size_t a = 0; a < rank_; ++a) {
      if (bits[a] == 0) continue;
      const double cell =
          (static_cast<double>(lo_[c * rank_ + a]) - static_cast<double>(min_lo[a])) * per_cell[a];
      key |= (static_cast<uint64_t>(std::min(cell, cells[a] - 1)) >> drop[a]) << shift[a];
    }
    keyed[p] = {key, c};
  }
  // Least significant digit first, 8 bits a pass: stable, O(n) a pass.
  for (int digit = 0; digit < key_bits; digit += 8) {
    size_t starts[257] = {};
    for (const auto& k : keyed) ++starts[((k.first >> digit) & 255) + 1];
    for (size_t d = 0; d < 256; ++d) starts[d + 1] += starts[d];
    for (const auto& k : keyed) spare[starts[(k.first >> digit) & 255]++] = k;
    keyed.swap(spare);
  }
  for (size_t p = 0; p < order_.size(); ++p) order_[p] = keyed[p].second;
}

size_t ChunkIndex::Build(size_t begin, size_t end) {
  const size_t node = nodes_.size();
  nodes_.push_back(Node{begin, end, 0});
  node_lo_.resize(node_lo_.size() + rank_, std::numeric_limits<int64_t>::max());
  node_end_.resize(node_end_.size() + rank_, std::numeric_limits<int64_t>::min());
  if (end - begin <= kLeafChunks) {  // a leaf: its chunks' bounds
    for (size_t p = begin; p < end; ++p) {
      for (size_t a = 0; a < rank_; ++a) {
        node_lo_[node * rank_ + a] =
            std::min(node_lo_[node * rank_ + a], lo_[order_[p] * rank_ + a]);
        node_end_[node * rank_ + a] =
            std::max(node_end_[node * rank_ + a], end_[order_[p] * rank_ + a]);
      }
    }
    return node;
  }
  Build(begin, begin + (end - begin) / 2);
  const size_t right = Build(begin + (end - begin) / 2, end);
  nodes_[node].right = right;
  for (size_t a = 0; a < rank_; ++a) {  // the union of its children's bounds
    node_lo_[node * rank_ + a] =
        std::min(node_lo_[(node + 1) * rank_ + a], node_lo_[right * rank_ + a]);
    node_end_[node * rank_ + a] =
        std::max(node_end_[(node + 1) * rank_ + a], node_end_[right * rank_ + a]);
  }
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
    if (!Overlaps(node_lo_.data() + n * rank_, node_end_.data() + n * rank_, qlo, qend.data(),
                  rank_))
      continue;
    const Node& node = nodes_[n];
    if (node.right != 0) {
      stack.push_back(node.right);
      stack.push_back(n + 1);
      continue;
    }
    for (size_t p = node.begin; p < node.end; ++p) {
      const size_t c = order_[p];
      if (Overlaps(lo_.data() + c * rank_, end_.data() + c * rank_, qlo, qend.data(), rank_))
        out.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace distckpt
