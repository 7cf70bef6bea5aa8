// Staging of device tensors through page-locked host buffers, for the save
// and load paths (core/device.h has the copies; strategy/staging.h the
// buffers).
//
// DeviceToHostPipeline hands out the host bytes of a list of tensors in
// order while copying ahead: when the caller takes tensor i, the copy of
// tensor i+1 (up to `depth` - 1 ahead) is already queued on a side stream,
// so device-to-host copies overlap the caller's writes. Host tensors pass
// through without a copy. At most `depth` staging buffers are held at once.
//
// SharedStagingPool() is the process's pool for these buffers (page-locked
// memory is slow to allocate: buffers are kept for the next save or load).
//
// Thread-safety: a pipeline is used by one thread; the shared pool is
// thread-safe.
#ifndef DISTCKPT_STRATEGY_DEVICE_STAGING_H_
#define DISTCKPT_STRATEGY_DEVICE_STAGING_H_

#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "strategy/staging.h"

namespace distckpt {

StagingPool& SharedStagingPool();

class DeviceToHostPipeline {
 public:
  DeviceToHostPipeline(std::vector<Tensor> tensors, StagingPool& pool, int depth = 2);
  DeviceToHostPipeline(const DeviceToHostPipeline&) = delete;
  DeviceToHostPipeline& operator=(const DeviceToHostPipeline&) = delete;

  // The host bytes of the next tensor (the first call: tensor 0), valid
  // until the following call. Throws kInvalidArgument past the end.
  std::span<const std::byte> Next();

  uint64_t bytes_copied() const { return bytes_copied_; }      // device to host
  double seconds_waiting() const { return seconds_waiting_; }  // blocked on copies

 private:
  struct Slot {
    std::shared_ptr<StagingBuffer> buffer;
    AsyncCopy* copy;
    uint64_t ticket;
  };
  void QueueThrough(size_t index);  // queues copies of tensors [queued_, index]
  AsyncCopy& CopyFor(const Device& device);

  std::vector<Tensor> tensors_;
  StagingPool& pool_;
  const size_t depth_;
  std::map<int, std::unique_ptr<AsyncCopy>> copies_;  // by device index
  std::deque<Slot> in_flight_;                        // tensors [taken_, queued_)
  std::shared_ptr<StagingBuffer> current_;
  size_t queued_ = 0, taken_ = 0;
  uint64_t bytes_copied_ = 0;
  double seconds_waiting_ = 0;
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_DEVICE_STAGING_H_
