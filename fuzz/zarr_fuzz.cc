// libFuzzer target: Megatron's legacy zarr arrays (format/zarr/zarr_array.h):
// a .zarray's JSON and its checks, then the chunk grid it describes (grid
// shape, chunk count, file size, the box of the first and the last chunk,
// the chunk file names). Any input parses or throws CheckpointError; what
// parses describes a grid whose chunks lie inside the shape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/box.h"
#include "core/error.h"
#include "format/zarr/zarr_array.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    distckpt::ZarrArray a = distckpt::ParseZarray(text, "fuzz/.zarray");
    distckpt::Shape grid = a.GridShape();
    a.NumChunks();
    a.ChunkFileBytes();
    if (grid.size() != a.shape.size()) __builtin_trap();
    bool empty = false;
    for (int64_t g : grid) empty = empty || g == 0;
    if (!empty) {
      distckpt::Shape first(grid.size(), 0), last = grid;
      for (int64_t& g : last) --g;
      for (const distckpt::Shape& index : {first, last}) {
        distckpt::Box box = a.ChunkBox(index);
        for (size_t d = 0; d < box.shape.size(); ++d) {
          if (box.offset[d] < 0 || box.shape[d] < 0 || box.offset[d] + box.shape[d] > a.shape[d]) {
            __builtin_trap();
          }
        }
        distckpt::ZarrArray::ChunkKey(index);
      }
    }
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
