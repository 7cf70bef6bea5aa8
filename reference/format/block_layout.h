// How a chunk's payload is cut into the blocks that carry one checksum each
// (native format, FORMAT.md "Verification"), and which blocks a partial read
// touches.
//
// Versions 2 and 3 cut the payload into `block_size`-byte blocks, the last
// one shorter (Uniform). Version 4 cuts it into tiles laid along the
// boundaries a reshard cuts (Tiles): the payload is seen as rows (the last
// axis of the chunk's box; a flat or 0-d chunk is rows of `block_size`
// bytes), each row cut into the same column pieces and the rows into groups;
// a tile is one column piece of one group of rows, so its bytes are in
// general not contiguous. Pieces (groups) end at every point where a
// tensor-parallel degree t in [2, 8] that divides the axis's global size
// would cut it (multiples of global / t), when the chunk holds part of the
// last (second last) axis or all of both; groups end at plane boundaries
// (the axes before the last two); pieces hold at most `block_size` bytes.
// A resharded read along the last axis, or along the rows, at any such
// degree therefore touches only tiles it needs whole, at any other point at
// most a piece or a group more per run.
//
// Tile t is group t / pieces(), piece t % pieces(); tiles are numbered in
// payload order of their first byte within a group row.
//
// Thread-safety: a value type; const methods are safe concurrently.
#ifndef DISTCKPT_FORMAT_BLOCK_LAYOUT_H_
#define DISTCKPT_FORMAT_BLOCK_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/box.h"
#include "format/format.h"

namespace distckpt {

class BlockLayout {
 public:
  BlockLayout() = default;
  // Versions 2 and 3: blocks of `block_size` bytes (>= 1), the last shorter.
  static BlockLayout Uniform(uint64_t length, uint64_t block_size);
  // Version 4: tiles of a chunk with box `box` (global coordinates) of a
  // tensor of `global_shape`, elements of `element_bytes`, `length` payload
  // bytes, at most about `block_size` bytes a tile; `flat` chunks (a range
  // of the box's elements) are cut as Uniform.
  static BlockLayout Tiles(const Shape& global_shape, const Box& box, bool flat,
                           uint64_t element_bytes, uint64_t length, uint64_t block_size);

  uint64_t length() const { return length_; }
  uint64_t tiles() const { return groups_ * pieces(); }
  uint64_t pieces() const { return cols_.size() - 1; }
  // Whether every tile is one contiguous byte range.
  bool contiguous() const { return pieces() == 1 || height_ == 1; }

  // Calls fn(offset, bytes) for each contiguous byte range of tile t, in order.
  template <typename Fn>
  void ForEachPart(uint64_t t, Fn&& fn) const {
    const uint64_t g = t / pieces(), j = t % pieces();
    const auto [r0, r1] = GroupRows(g);
    if (pieces() == 1) {  // whole rows: one range
      fn(r0 * row_bytes_, std::min(r1 * row_bytes_, length_) - r0 * row_bytes_);
      return;
    }
    for (uint64_t r = r0; r < r1; ++r) {
      const uint64_t from = r * row_bytes_ + cols_[j];
      fn(from, std::min(r * row_bytes_ + cols_[j + 1], length_) - from);
    }
  }
  // Calls fn(offset, bytes) for the contiguous byte ranges that pieces
  // [j0, j1) of group g cover, in payload order: one range when they are
  // whole rows or the group is one row, else one per row.
  template <typename Fn>
  void ForEachGroupPart(uint64_t g, uint64_t j0, uint64_t j1, Fn&& fn) const {
    const auto [r0, r1] = GroupRows(g);
    if ((j0 == 0 && j1 == pieces()) || r1 - r0 == 1) {
      const uint64_t from = r0 * row_bytes_ + cols_[j0];
      fn(from, std::min((r1 - 1) * row_bytes_ + cols_[j1], length_) - from);
      return;
    }
    for (uint64_t r = r0; r < r1; ++r) {
      const uint64_t from = r * row_bytes_ + cols_[j0];
      fn(from, std::min(r * row_bytes_ + cols_[j1], length_) - from);
    }
  }
  // Payload bytes [begin, end) of group g's rows.
  std::pair<uint64_t, uint64_t> GroupBytes(uint64_t g) const;
  // The tiles that `runs` (payload offsets; sorted, disjoint) touch, as
  // sorted disjoint intervals [first, last).
  std::vector<std::pair<uint64_t, uint64_t>> Touched(std::span<const ReadRun> runs) const;

  // The end of the unit holding payload byte `offset`: its group's last byte
  // + 1, or, for a group over `max_bytes` whose tiles are contiguous, its
  // tile's. Reads cut at unit ends touch disjoint tiles on either side.
  uint64_t UnitEnd(uint64_t offset, uint64_t max_bytes) const;

  // Contiguous payload ranges [begin, end) holding tiles [first, last),
  // about `bytes` each (a group whose tiles are not contiguous is never
  // split), in order; they tile the payload.
  struct Piece {
    uint64_t first, last, begin, end;
  };
  std::vector<Piece> Pieces(uint64_t bytes) const;

 private:
  std::pair<uint64_t, uint64_t> GroupRows(uint64_t g) const;  // [r0, r1)
  uint64_t GroupOfRow(uint64_t row) const;

  uint64_t length_ = 0;
  uint64_t row_bytes_ = 1;
  uint64_t rows_ = 0;
  uint64_t height_ = 1;  // rows of a group, at most
  uint64_t groups_ = 0;
  std::vector<uint64_t> cols_ = {0, 1};  // piece boundaries within a row, bytes
  struct Band {                          // rows cut into groups of height_
    uint64_t first_row, first_group;
  };
  std::vector<Band> bands_;
};

// The checksum of tile t of the payload `layout` describes, `at(offset)`
// giving the address of payload byte `offset` (the tile's parts need not be
// adjacent in memory), with `seed` (the tile's own seed): its parts hashed
// as one byte string (XXH3_64bits_withSeed of their concatenation). A tile
// of several parts is gathered into `scratch` (reused across calls) and
// hashed in one call: the same value as streaming its parts, without a
// streaming update per part (a row piece of 128 bytes: the update's fixed
// cost was most of the hash's; bench/README.md).
template <typename At>
uint64_t TileChecksum(const BlockLayout& layout, uint64_t t, uint64_t seed, At&& at,
                      std::vector<std::byte>& scratch);

}  // namespace distckpt

#include <cstring>

#include "io/checksum.h"

namespace distckpt {

template <typename At>
uint64_t TileChecksum(const BlockLayout& layout, uint64_t t, uint64_t seed, At&& at,
                      std::vector<std::byte>& scratch) {
  if (layout.contiguous()) {
    uint64_t sum = 0;
    layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
      sum = Checksum(std::span<const std::byte>(at(offset), bytes), seed);
    });
    return sum;
  }
  size_t used = 0;
  layout.ForEachPart(t, [&](uint64_t offset, uint64_t bytes) {
    if (scratch.size() < used + bytes) scratch.resize(std::max(used + bytes, 2 * scratch.size()));
    std::memcpy(scratch.data() + used, at(offset), bytes);
    used += bytes;
  });
  return Checksum(std::span<const std::byte>(scratch.data(), used), seed);
}

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_BLOCK_LAYOUT_H_
