#include "strategy/device_staging.h"

#include <chrono>

#include "core/error.h"

namespace distckpt {

StagingPool& SharedStagingPool() {
  static StagingPool* pool = new StagingPool();  // never destroyed: used at exit
  return *pool;
}

DeviceToHostPipeline::DeviceToHostPipeline(std::vector<Tensor> tensors, StagingPool& pool,
                                           int depth)
    : tensors_(std::move(tensors)), pool_(pool), depth_(static_cast<size_t>(std::max(depth, 1))) {}

AsyncCopy& DeviceToHostPipeline::CopyFor(const Device& device) {
  std::unique_ptr<AsyncCopy>& copy = copies_[device.index];
  if (!copy) copy = std::make_unique<AsyncCopy>(device);
  return *copy;
}

void DeviceToHostPipeline::QueueThrough(size_t index) {
  for (; queued_ <= index && queued_ < tensors_.size(); ++queued_) {
    const Tensor& t = tensors_[queued_];
    Slot slot{nullptr, nullptr, 0};
    if (t.defined() && t.on_cuda()) {
      slot.buffer = pool_.Acquire(t.nbytes());
      slot.copy = &CopyFor(t.device());
      slot.ticket = slot.copy->QueueToHost(slot.buffer->data(), t.raw_data(), t.nbytes());
      bytes_copied_ += t.nbytes();
    }
    in_flight_.push_back(std::move(slot));
  }
}

std::span<const std::byte> DeviceToHostPipeline::Next() {
  if (taken_ >= tensors_.size()) {
    Fail(ErrorKind::kInvalidArgument, "DeviceToHostPipeline: all {} tensors taken",
         tensors_.size());
  }
  current_.reset();  // the previous tensor's buffer goes back to the pool
  QueueThrough(taken_ + depth_ - 1);
  Slot slot = std::move(in_flight_.front());
  in_flight_.pop_front();
  const Tensor& t = tensors_[taken_++];
  if (!slot.copy) return t.defined() ? t.bytes() : std::span<const std::byte>();
  const auto start = std::chrono::steady_clock::now();
  slot.copy->Wait(slot.ticket);
  seconds_waiting_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  current_ = std::move(slot.buffer);
  return {current_->data(), t.nbytes()};
}

}  // namespace distckpt
