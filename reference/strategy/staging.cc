#include "strategy/staging.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "core/device.h"

namespace distckpt {

bool StagingBuffer::PinnedMemoryAvailable() { return CudaDeviceCount() > 0; }

StagingBuffer::StagingBuffer(size_t capacity) : capacity_(capacity) {
  storage_ = AllocateHostStaging(capacity, &pinned_);
}

StagingBuffer::~StagingBuffer() = default;

struct StagingPool::State {
  std::mutex mu;
  bool closed = false;                                         // the pool object is gone
  std::multimap<size_t, std::unique_ptr<StagingBuffer>> free;  // by capacity
  uint64_t allocations = 0, reuses = 0, bytes_allocated = 0;
};

StagingPool::StagingPool() : state_(std::make_shared<State>()) {}

StagingPool::~StagingPool() {
  std::lock_guard lock(state_->mu);
  state_->closed = true;
  state_->free.clear();
}

std::shared_ptr<StagingBuffer> StagingPool::Acquire(size_t bytes) {
  std::unique_ptr<StagingBuffer> buffer;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->free.lower_bound(bytes);
    if (it != state_->free.end()) {
      buffer = std::move(it->second);
      state_->free.erase(it);
      ++state_->reuses;
    } else {
      ++state_->allocations;
      state_->bytes_allocated += bytes;
    }
  }
  if (!buffer) buffer = std::make_unique<StagingBuffer>(bytes);
  // The deleter hands the buffer back unless the pool is gone.
  std::shared_ptr<State> state = state_;
  StagingBuffer* raw = buffer.release();
  return std::shared_ptr<StagingBuffer>(raw, [state](StagingBuffer* b) {
    std::unique_ptr<StagingBuffer> owned(b);
    std::lock_guard lock(state->mu);
    if (!state->closed) state->free.emplace(owned->capacity(), std::move(owned));
  });
}

uint64_t StagingPool::allocations() const {
  std::lock_guard lock(state_->mu);
  return state_->allocations;
}

uint64_t StagingPool::reuses() const {
  std::lock_guard lock(state_->mu);
  return state_->reuses;
}

uint64_t StagingPool::bytes_allocated() const {
  std::lock_guard lock(state_->mu);
  return state_->bytes_allocated;
}

std::shared_ptr<StagingBuffer> StagingPool::Unpooled(size_t bytes) {
  return std::make_shared<StagingBuffer>(bytes);
}

}  // namespace distckpt
