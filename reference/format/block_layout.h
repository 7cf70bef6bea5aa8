// How a chunk's payload is cut into the blocks that carry one checksum each
// (native format, FORMAT.md "Verification"), and which blocks a partial read
// touches.
//
// Versions 2 and 3 cut the payload into `block_size`-byte blocks, the last
// one shorter (Uniform). Version 4 cuts it into tiles laid along the
// boundaries a reshard cuts (Tiles): the payload is seen as rows (the last
// axis of the chunk's box; a 0-d chunk is rows of `block_size` bytes), each
// row cut into the same column pieces and the rows into groups; a tile is
// one column piece of one group of rows, so its bytes are in general not
// contiguous. Pieces (groups) end at every point where a tensor-parallel
// degree t in [2, 8] that divides the axis's global size would cut it
// (multiples of global / t), when the chunk holds part of the last (second
// last) axis or all of both; groups end at plane boundaries (the axes
// before the last two); pieces hold at most `block_size` bytes. A resharded
// read along the last axis, or along the rows, at any such degree therefore
// touches only tiles it needs whole, at any other point at most a piece or a
// group more per run.
//
// A flat chunk (elements [start, stop) of its box's row-major order) is cut
// the same way (kRows: native version 5, DCP index version 5): its payload
// is the box's rows from the one holding `start`, the first and last of
// them possibly partial; a partial first or last row is a group of its own,
// and its pieces outside the payload are no tiles. Native version 4 and DCP
// index versions 3 and 4 cut flat chunks as Uniform (kUniform).
//
// Tiles are numbered in payload order of their first byte within a group
// row: group by group, piece by piece.
//
// Thread-safety: a value type; const methods are safe concurrently.
#ifndef DISTCKPT_FORMAT_BLOCK_LAYOUT_H_
#define DISTCKPT_FORMAT_BLOCK_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/box.h"
#include "format/format.h"

namespace distckpt {

class BlockLayout {
 public:
  // How Tiles cuts a flat chunk.
  enum class Flat {
    kUniform,  // native version 4, DCP index versions 3 and 4: as Uniform
    kRows,     // native version 5, DCP index version 5: tiles of its rows
  };

  BlockLayout() = default;
  // Versions 2 and 3: blocks of `block_size` bytes (>= 1), the last shorter.
  static BlockLayout Uniform(uint64_t length, uint64_t block_size);
  // Version 4 and later: tiles of a chunk with box `box` (global
  // coordinates) of a tensor of `global_shape`, elements of
  // `element_bytes`, `length` payload bytes, at most about `block_size`
  // bytes a tile. A `flat` chunk (elements [flat.start, flat.stop) of the
  // box's row-major order) is cut as `flat_layout` says.
  static BlockLayout Tiles(const Shape& global_shape, const Box& box,
                           const std::optional<FlatRange>& flat, Flat flat_layout,
                           uint64_t element_bytes, uint64_t length, uint64_t block_size);

  uint64_t length() const { return length_; }
  uint64_t tiles() const { return tiles_; }
  uint64_t pieces() const { return cols_.size() - 1; }
  // Whether every tile is one contiguous byte range.
  bool contiguous() const { return pieces() == 1 || height_ == 1; }
  // Whether tile t is the first of its group.
  bool StartsGroup(uint64_t t) const { return (t + skip_) % pieces() == 0; }
  // Tile t's group and piece.
  std::pair<uint64_t, uint64_t> GroupPiece(uint64_t t) const {
    return {(t + skip_) / pieces(), (t + skip_) % pieces()};
  }

  // Calls fn(offset, bytes) for each contiguous byte range of tile t, in
  // order; each holds at least one byte.
  template <typename Fn>
  void ForEachPart(uint64_t t, Fn&& fn) const {
    const uint64_t u = t + skip_, end = lead_ + length_;
    const uint64_t g = u / pieces(), j = u % pieces();
    const auto [r0, r1] = GroupRows(g);
    if (pieces() == 1) {  // whole rows: one range
      const uint64_t from = std::max(r0 * row_bytes_, lead_);
      fn(from - lead_, std::min(r1 * row_bytes_, end) - from);
      return;
    }
    for (uint64_t r = r0; r < r1; ++r) {
      const uint64_t from = std::max(r * row_bytes_ + cols_[j], lead_);
      const uint64_t to = std::min(r * row_bytes_ + cols_[j + 1], end);
      if (from < to) fn(from - lead_, to - from);
    }
  }
  // Calls fn(offset, bytes) for the contiguous byte ranges that pieces
  // [j0, j1) of group g cover, in payload order: one range when they are
  // whole rows or the group is one row, else one per row.
  template <typename Fn>
  void ForEachGroupPart(uint64_t g, uint64_t j0, uint64_t j1, Fn&& fn) const {
    const auto [r0, r1] = GroupRows(g);
    const uint64_t end = lead_ + length_;
    // Row bytes [from, to), clipped to the payload (a flat chunk's partial
    // first and last rows), as payload offsets.
    auto part = [&](uint64_t from, uint64_t to) {
      from = std::max(from, lead_);
      to = std::min(to, end);
      if (from < to) fn(from - lead_, to - from);
    };
    if ((j0 == 0 && j1 == pieces()) || r1 - r0 == 1) {
      part(r0 * row_bytes_ + cols_[j0], (r1 - 1) * row_bytes_ + cols_[j1]);
      return;
    }
    for (uint64_t r = r0; r < r1; ++r) part(r * row_bytes_ + cols_[j0], r * row_bytes_ + cols_[j1]);
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

  // Rows are counted from the one holding payload byte 0, which lies
  // `lead_` bytes into it (a flat chunk's first row may be partial):
  // payload byte b is byte (b + lead_) % row_bytes_ of row (b + lead_) /
  // row_bytes_. Tile t is piece (t + skip_) % pieces() of group (t +
  // skip_) / pieces(): a partial first row's pieces before lead_ are none.
  uint64_t length_ = 0;
  uint64_t lead_ = 0;
  uint64_t skip_ = 0;
  uint64_t tiles_ = 0;
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
