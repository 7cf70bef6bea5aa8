#include "format/block_layout.h"

#include <algorithm>

namespace distckpt {
namespace {

// Local positions in (0, extent) of an axis of `global` elements, the box
// starting at `offset`, where a tensor-parallel degree t in [2, 8] dividing
// `global` cuts it; with 0 and `extent`, sorted.
std::vector<uint64_t> Cuts(uint64_t global, uint64_t offset, uint64_t extent) {
  std::vector<uint64_t> cuts = {0, extent};
  for (uint64_t t = 2; t <= 8; ++t) {
    if (global % t != 0) continue;
    const uint64_t step = global / t;
    for (uint64_t x = (offset / step + 1) * step; x < offset + extent; x += step)
      cuts.push_back(x - offset);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// Plane and row bands above this many are not cut at row cuts (a box with
// millions of tiny planes): its rows are grouped by height alone.
constexpr uint64_t kMaxBands = 1 << 16;
constexpr uint64_t kMaxPieces = 1 << 16;

}  // namespace

BlockLayout BlockLayout::Uniform(uint64_t length, uint64_t block_size) {
  BlockLayout layout;
  layout.length_ = length;
  layout.row_bytes_ = block_size;
  layout.cols_ = {0, block_size};
  layout.rows_ = (length + block_size - 1) / block_size;
  layout.groups_ = layout.rows_;
  layout.tiles_ = layout.rows_;
  layout.bands_ = {{0, 0}};
  return layout;
}

BlockLayout BlockLayout::Tiles(const Shape& global_shape, const Box& box,
                               const std::optional<FlatRange>& flat, Flat flat_layout,
                               uint64_t element_bytes, uint64_t length, uint64_t block_size) {
  const size_t k = box.shape.size();
  if ((flat && flat_layout == Flat::kUniform) || k == 0 || length == 0 ||
      global_shape.size() != k) {
    return Uniform(length, block_size);
  }
  BlockLayout layout;
  layout.length_ = length;
  const uint64_t columns = static_cast<uint64_t>(box.shape[k - 1]);
  layout.row_bytes_ = columns * element_bytes;
  // A row of more than kMaxPieces blocks (a row of over 256 MiB in
  // 4 KiB blocks) is cut as Uniform: the list of pieces stays small.
  if (layout.row_bytes_ / block_size > kMaxPieces) return Uniform(length, block_size);
  // A flat chunk's payload starts in the box's row `first_row`, `lead_`
  // bytes into it.
  const uint64_t start = flat ? static_cast<uint64_t>(flat->start) : 0;
  const uint64_t first_row = start / columns;
  layout.lead_ = start % columns * element_bytes;
  const uint64_t end = layout.lead_ + length;
  layout.rows_ = (end + layout.row_bytes_ - 1) / layout.row_bytes_;
  // The axes a reshard cuts: those of the last two the chunk holds part of
  // (a tensor is sharded along the same axis at any degree), both when it
  // holds them whole. The other is not cut: fewer tiles, fewer checksums.
  const bool part_cols = box.shape[k - 1] < global_shape[k - 1];
  const bool part_rows = k >= 2 && box.shape[k - 2] < global_shape[k - 2];
  const bool cut_cols = part_cols || !part_rows, cut_rows = part_rows || !part_cols;
  // Column pieces: the segments between cuts, each split into pieces of at
  // most block_size bytes (whole elements).
  layout.cols_ = {0};
  uint64_t widest = 0;
  const std::vector<uint64_t> cuts = cut_cols
                                         ? Cuts(static_cast<uint64_t>(global_shape[k - 1]),
                                                static_cast<uint64_t>(box.offset[k - 1]), columns)
                                         : std::vector<uint64_t>{0, columns};
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const uint64_t a = cuts[i], b = cuts[i + 1];
    const uint64_t n =
        std::max<uint64_t>(1, ((b - a) * element_bytes + block_size - 1) / block_size);
    for (uint64_t p = 1; p <= n; ++p) {
      const uint64_t end = a + (b - a) * p / n;
      if (end * element_bytes == layout.cols_.back()) continue;
      widest = std::max(widest, end * element_bytes - layout.cols_.back());
      layout.cols_.push_back(end * element_bytes);
    }
  }
  layout.height_ = std::max<uint64_t>(1, block_size / widest);
  // Row bands: planes (the axes before the last two), each cut where the
  // rows' axis is cut, of the box's rows [first_row, first_row + rows_).
  std::vector<uint64_t> row_cuts = {0, layout.rows_};
  if (k >= 2) {
    const uint64_t rows = static_cast<uint64_t>(box.shape[k - 2]);
    const std::vector<uint64_t> cut = cut_rows
                                          ? Cuts(static_cast<uint64_t>(global_shape[k - 2]),
                                                 static_cast<uint64_t>(box.offset[k - 2]), rows)
                                          : std::vector<uint64_t>{0, rows};
    const uint64_t p0 = first_row / rows, p1 = (first_row + layout.rows_ - 1) / rows + 1;
    if ((p1 - p0) * cut.size() <= kMaxBands) {
      row_cuts = {0};
      for (uint64_t p = p0; p < p1; ++p) {
        for (size_t i = 0; i + 1 < cut.size(); ++i) {
          const uint64_t row = p * rows + cut[i];
          if (row > first_row && row < first_row + layout.rows_)
            row_cuts.push_back(row - first_row);
        }
      }
      row_cuts.push_back(layout.rows_);
    }
  }
  // A partial first or last row is a band of its own.
  if (layout.lead_ > 0 && layout.rows_ > 1) row_cuts.push_back(1);
  if (end % layout.row_bytes_ != 0 && layout.rows_ > 1) row_cuts.push_back(layout.rows_ - 1);
  std::sort(row_cuts.begin(), row_cuts.end());
  row_cuts.erase(std::unique(row_cuts.begin(), row_cuts.end()), row_cuts.end());
  for (size_t i = 0; i + 1 < row_cuts.size(); ++i) {
    layout.bands_.push_back({row_cuts[i], layout.groups_});
    layout.groups_ += (row_cuts[i + 1] - row_cuts[i] + layout.height_ - 1) / layout.height_;
  }
  // The tiles: from the piece holding the first payload byte to the one
  // holding the last.
  auto piece_of = [&](uint64_t at_in_row) {
    return static_cast<uint64_t>(
        std::upper_bound(layout.cols_.begin(), layout.cols_.end(), at_in_row) -
        layout.cols_.begin() - 1);
  };
  const uint64_t last_row = layout.rows_ - 1;
  layout.skip_ = piece_of(layout.lead_);
  layout.tiles_ = layout.GroupOfRow(last_row) * layout.pieces() +
                  piece_of(end - 1 - last_row * layout.row_bytes_) + 1 - layout.skip_;
  return layout;
}

std::pair<uint64_t, uint64_t> BlockLayout::GroupRows(uint64_t g) const {
  if (bands_.size() == 1) {  // no cuts (1-D and uniform chunks): no search
    const uint64_t r0 = g * height_;
    return {r0, std::min(r0 + height_, rows_)};
  }
  auto band = std::upper_bound(bands_.begin(), bands_.end(), g,
                               [](uint64_t g, const Band& b) { return g < b.first_group; }) -
              1;
  const uint64_t end = band + 1 == bands_.end() ? rows_ : (band + 1)->first_row;
  const uint64_t r0 = band->first_row + (g - band->first_group) * height_;
  return {r0, std::min(r0 + height_, end)};
}

uint64_t BlockLayout::GroupOfRow(uint64_t row) const {
  if (bands_.size() == 1) return row / height_;
  auto band = std::upper_bound(bands_.begin(), bands_.end(), row,
                               [](uint64_t r, const Band& b) { return r < b.first_row; }) -
              1;
  return band->first_group + (row - band->first_row) / height_;
}

std::pair<uint64_t, uint64_t> BlockLayout::GroupBytes(uint64_t g) const {
  const auto [r0, r1] = GroupRows(g);
  return {std::max(r0 * row_bytes_, lead_) - lead_,
          std::min(r1 * row_bytes_, lead_ + length_) - lead_};
}

std::vector<std::pair<uint64_t, uint64_t>> BlockLayout::Touched(
    std::span<const ReadRun> runs) const {
  // Intervals of tiles + skip_ (group * pieces + piece) first.
  std::vector<std::pair<uint64_t, uint64_t>> touched;
  const uint64_t m = pieces();
  auto add = [&](uint64_t first, uint64_t last) {
    if (!touched.empty() && touched.back().first <= first && last <= touched.back().second) return;
    touched.emplace_back(first, last);
  };
  // Bytes [c0, c1) of row `row`.
  auto add_row = [&](uint64_t row, uint64_t c0, uint64_t c1) {
    const uint64_t j0 = std::upper_bound(cols_.begin(), cols_.end(), c0) - cols_.begin() - 1;
    const uint64_t j1 = std::lower_bound(cols_.begin(), cols_.end(), c1) - cols_.begin();
    const uint64_t g = GroupOfRow(row);
    add(g * m + j0, g * m + j1);
  };
  for (const ReadRun& run : runs) {
    if (run.length == 0) continue;
    const uint64_t a = run.offset_in_chunk + lead_, b = a + run.length;
    const uint64_t ra = a / row_bytes_, rb = (b - 1) / row_bytes_;
    if (ra == rb) {
      add_row(ra, a - ra * row_bytes_, b - ra * row_bytes_);
      continue;
    }
    add_row(ra, a - ra * row_bytes_, row_bytes_);
    if (rb > ra + 1) add(GroupOfRow(ra + 1) * m, (GroupOfRow(rb - 1) + 1) * m);
    add_row(rb, 0, b - rb * row_bytes_);
  }
  std::sort(touched.begin(), touched.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (auto [first, last] : touched) {
    // The pieces of a partial first or last row outside the payload are no
    // tiles (a run never reaches them; clamped all the same).
    first = std::max(first, skip_) - skip_;
    last = std::min(std::max(last, skip_) - skip_, tiles_);
    if (first >= last) continue;
    if (!merged.empty() && first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, last);
    } else {
      merged.emplace_back(first, last);
    }
  }
  return merged;
}

uint64_t BlockLayout::UnitEnd(uint64_t offset, uint64_t max_bytes) const {
  const uint64_t at = offset + lead_;
  const uint64_t row = at / row_bytes_;
  const uint64_t end = GroupBytes(GroupOfRow(row)).second + lead_;
  if (end - row * row_bytes_ <= max_bytes || !contiguous() || pieces() == 1) return end - lead_;
  const uint64_t j =
      std::upper_bound(cols_.begin(), cols_.end(), at - row * row_bytes_) - cols_.begin();
  return std::min(row * row_bytes_ + cols_[j], lead_ + length_) - lead_;
}

std::vector<BlockLayout::Piece> BlockLayout::Pieces(uint64_t bytes) const {
  std::vector<Piece> out;
  const uint64_t m = pieces();
  Piece current{0, 0, 0, 0};
  auto take = [&](uint64_t last, uint64_t end) {  // last: tile + skip_
    current.last = std::min(last - skip_, tiles_);
    current.end = end;
    if (current.end - current.begin >= bytes) {
      out.push_back(current);
      current = {current.last, current.last, end, end};
    }
  };
  for (uint64_t g = 0; g < groups_; ++g) {
    const auto [b0, b1] = GroupBytes(g);
    if (height_ == 1 && m > 1 && b1 - b0 > bytes) {  // one long row: its tiles one by one
      const uint64_t row_start = GroupRows(g).first * row_bytes_;
      for (uint64_t j = 0; j < m; ++j) {
        const uint64_t u = g * m + j;
        if (u < skip_ || u >= skip_ + tiles_) continue;  // no tile
        take(u + 1, std::min(row_start + cols_[j + 1], lead_ + length_) - lead_);
      }
    } else {
      take((g + 1) * m, b1);
    }
  }
  if (current.end > current.begin) out.push_back(current);
  return out;
}

}  // namespace distckpt
