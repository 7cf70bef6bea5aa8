#include "format/chunk_layouts.h"

#include <cstdint>

#include "format/block_checksums.h"

namespace distckpt {

ChunkLayouts::~ChunkLayouts() {
  for (size_t i = 0; i < slots_; ++i) delete layouts_[i].load(std::memory_order_relaxed);
}

namespace {

ChunkLayouts::Chunk Compute(const StoredTensor& tensor, const StoredChunk& chunk) {
  return {ChunkLayout(tensor, chunk), ChunkBindingSeed(tensor.key, tensor.dtype, chunk)};
}

}  // namespace

const ChunkLayouts::Chunk& ChunkLayouts::Get(const CheckpointMetadata& metadata,
                                             const StoredTensor& tensor, const StoredChunk& chunk,
                                             Chunk& storage) {
  std::call_once(indexed_, [&] {
    metadata_ = &metadata;
    size_t slots = 0;
    first_.reserve(metadata.tensors.size());
    for (const auto& [key, t] : metadata.tensors) {
      first_.emplace(&t, slots);
      slots += t.chunks.size();
    }
    layouts_ = std::make_unique<std::atomic<const Chunk*>[]>(slots);
    slots_ = slots;
  });
  const auto it = &metadata == metadata_ ? first_.find(&tensor) : first_.end();
  const auto at = reinterpret_cast<uintptr_t>(&chunk);
  const auto base = reinterpret_cast<uintptr_t>(tensor.chunks.data());
  const size_t i = (at - base) / sizeof(StoredChunk);
  if (it == first_.end() || at < base || (at - base) % sizeof(StoredChunk) != 0 ||
      i >= tensor.chunks.size()) {
    storage = Compute(tensor, chunk);
    return storage;
  }
  std::atomic<const Chunk*>& slot = layouts_[it->second + i];
  if (const Chunk* kept = slot.load(std::memory_order_acquire)) return *kept;
  auto made = std::make_unique<const Chunk>(Compute(tensor, chunk));
  const Chunk* expected = nullptr;
  if (slot.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel)) {
    kept_.fetch_add(1, std::memory_order_relaxed);
    return *made.release();
  }
  return *expected;  // another thread kept its own first
}

}  // namespace distckpt
