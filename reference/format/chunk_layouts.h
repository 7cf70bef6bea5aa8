// ChunkLayouts: the block layout and binding seed of each chunk of one
// parsed checkpoint metadata (ChunkLayout and ChunkBindingSeed,
// block_checksums.h), computed on first use and kept for every later read of
// the chunk, so that a checkpoint loaded again (every load of a job, a
// benchmark) does not cut its chunks into tiles again (about 3.7 K
// instructions a chunk: a tenth of a verified load of 64 KiB tensors;
// bench/README.md) nor render their seeds' text again. Kept next to the metadata in the
// metadata cache (metadata_cache.h), and as it: only the chunks some read
// touched, as long as their metadata is cached.
//
// Contract: Get(metadata, tensor, chunk) is {ChunkLayout(tensor, chunk),
// ChunkBindingSeed(tensor.key, tensor.dtype, chunk)} (ChunkLayout's errors
// included: a failed computation keeps nothing). Only a chunk of the
// metadata the object is tied to (the first Get's; it must outlive this
// object and never change) is kept; any other is computed into `storage`.
//
// Thread-safety: Get may be called concurrently.
#ifndef DISTCKPT_FORMAT_CHUNK_LAYOUTS_H_
#define DISTCKPT_FORMAT_CHUNK_LAYOUTS_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "format/block_layout.h"
#include "format/checkpoint_metadata.h"

namespace distckpt {

class ChunkLayouts {
 public:
  ChunkLayouts() = default;
  ~ChunkLayouts();
  ChunkLayouts(const ChunkLayouts&) = delete;
  ChunkLayouts& operator=(const ChunkLayouts&) = delete;

  struct Chunk {
    BlockLayout layout;
    uint64_t seed = 0;
  };
  const Chunk& Get(const CheckpointMetadata& metadata, const StoredTensor& tensor,
                   const StoredChunk& chunk, Chunk& storage);
  // Layouts kept (for tests).
  size_t kept() const { return kept_.load(std::memory_order_relaxed); }

 private:
  std::once_flag indexed_;
  const CheckpointMetadata* metadata_ = nullptr;
  std::unordered_map<const StoredTensor*, size_t> first_;  // the tensor's first slot
  size_t slots_ = 0;
  std::unique_ptr<std::atomic<const Chunk*>[]> layouts_;  // one per chunk
  std::atomic<size_t> kept_{0};
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_CHUNK_LAYOUTS_H_
