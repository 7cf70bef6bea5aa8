// Host staging buffers for async saves: before an async save returns, every
// byte it will write is copied into one staging buffer, so the caller may
// change its tensors at once (pytorch/pytorch#144657: tensors of every
// device are staged, host ones included). A StagingPool keeps released
// buffers and hands them out again, so repeated saves of one model allocate
// once.
//
// Buffers are page-locked (pinned, cudaHostAlloc) in builds with CUDA when a
// device is present, so device-to-host staging copies can run at full
// speed; otherwise 64-byte aligned host memory.
//
// Thread-safety: Acquire and the counters are thread-safe; a buffer is
// written by the thread that staged it and then read by writer threads.
#ifndef DISTCKPT_STRATEGY_STAGING_H_
#define DISTCKPT_STRATEGY_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace distckpt {

class StagingBuffer {
 public:
  explicit StagingBuffer(size_t capacity);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  std::byte* data() { return storage_.get(); }
  const std::byte* data() const { return storage_.get(); }
  size_t capacity() const { return capacity_; }
  bool pinned() const { return pinned_; }
  // Whether buffers are pinned in this process (CUDA build, device present).
  static bool PinnedMemoryAvailable();

 private:
  std::shared_ptr<std::byte> storage_;
  size_t capacity_;
  bool pinned_ = false;
};

class StagingPool {
 public:
  StagingPool();
  ~StagingPool();  // buffers still in use are freed when their last user lets go
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of at least `bytes`: the smallest free one that fits, else a
  // new one. It returns to the pool when the last shared_ptr to it is gone.
  std::shared_ptr<StagingBuffer> Acquire(size_t bytes);

  uint64_t allocations() const;  // buffers allocated
  uint64_t reuses() const;       // Acquire calls served from the pool
  uint64_t bytes_allocated() const;

  // A buffer that belongs to no pool (freed when released).
  static std::shared_ptr<StagingBuffer> Unpooled(size_t bytes);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_STAGING_H_
