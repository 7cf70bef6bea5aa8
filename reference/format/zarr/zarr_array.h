// One Zarr v2 array as Megatron-Core's legacy `zarr` backend wrote it
// (FORMAT.md beside this file): its `.zarray` (JSON), parsed and checked,
// and the geometry of its chunk grid.
//
// Accepted: zarr_format 2; shape and chunks of equal length, shape >= 0 and
// chunks >= 1 per axis; dtype one of "<f8", "<f4", "<f2", "bfloat16"
// (Megatron's patch of zarr's "<V2" when tensorstore registered numpy's
// bfloat16), "|i1", "<i2", "<i4", "<i8", "|u1", "|b1"; order "C";
// compressor null; filters null; fill_value null, a number, a bool, or
// "NaN"/"Infinity"/"-Infinity"; dimension_separator "." when present. Any
// other field or value is refused naming the file and the field:
// CheckpointError(kUnsupported) for a valid Zarr feature distckpt does not
// read (compression, Fortran order, another dtype), kCorruption for text
// that is not a valid .zarray.
//
// Every chunk is stored whole, as zarr writes uncompressed chunks: the
// elements of the full chunk shape in C order, also at the array's edges
// (where the grid cell reaches past the shape, the file still holds the
// whole cell: the rows past the edge are padding).
//
// Thread-safety: value types and pure functions.
#ifndef DISTCKPT_FORMAT_ZARR_ZARR_ARRAY_H_
#define DISTCKPT_FORMAT_ZARR_ZARR_ARRAY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/box.h"
#include "core/dtype.h"

namespace distckpt {

inline constexpr char kZarrArrayFileName[] = ".zarray";
// A .zarray is a few hundred bytes; a larger one is refused before it is read.
inline constexpr uint64_t kLargestZarray = 64 << 10;

struct ZarrArray {
  DType dtype = DType::kF32;
  Shape shape;
  Shape chunks;  // the grid cell; every chunk file holds one whole cell

  // Chunks along each axis (ceil(shape / chunks)) and in all.
  Shape GridShape() const;
  uint64_t NumChunks() const;
  // Bytes of one chunk file: Volume(chunks) * DTypeSize(dtype).
  uint64_t ChunkFileBytes() const;
  // The elements of the array chunk `index` (grid coordinates) holds: its
  // cell clipped to the shape.
  Box ChunkBox(const Shape& index) const;
  // The chunk file's name: the grid coordinates joined by '.' ("1.0.2"),
  // "0" for an array of no axes.
  static std::string ChunkKey(const Shape& index);
};

// Parses and checks `text`, the .zarray at `path` (named in every error).
ZarrArray ParseZarray(std::string_view text, const std::string& path);

// The dtype's name in a .zarray ("<f4", "bfloat16", ...).
std::string_view ZarrDTypeName(DType dtype);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_ZARR_ZARR_ARRAY_H_
