// Device: where a Tensor's storage lives (host memory, or a CUDA device), and
// the few memory operations distckpt needs on devices: allocate, copy between
// host and device (synchronously or queued on a side stream), page-locked
// host memory, and dtype conversion on the device.
//
// Builds without the CUDA toolkit have the host device only: asking for a
// CUDA device throws CheckpointError(kUnsupported) naming it; so does a
// build with CUDA on a machine without a device. Nothing in this header
// exposes CUDA types.
//
// DISTCKPT_SIMULATE_CUDA=N (environment) makes N simulated CUDA devices whose
// memory is host memory, in any build: tests run every device code path
// (staging, pipelines, the host-access guard) without a GPU that way.
//
// Thread-safety: every function is thread-safe; an AsyncCopy is used by one
// thread at a time.
#ifndef DISTCKPT_CORE_DEVICE_H_
#define DISTCKPT_CORE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace distckpt {

struct Device {
  enum class Kind : uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA device ordinal

  static Device Cpu() { return {}; }
  static Device Cuda(int index = 0) { return {Kind::kCuda, index}; }
  // "cpu", "cuda", "cuda:N"; anything else throws kInvalidArgument.
  static Device Parse(std::string_view text);
  bool is_cpu() const { return kind == Kind::kCpu; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string ToString() const;  // "cpu", "cuda:N"
  bool operator==(const Device&) const = default;
};

// Whether this build has CUDA support (DISTCKPT_HAVE_CUDA).
bool CudaBuilt();
// CUDA devices visible to this process (0 without CUDA support or driver).
int CudaDeviceCount();
// Whether the CUDA devices are simulated (DISTCKPT_SIMULATE_CUDA).
bool CudaSimulated();
// Throws kUnsupported unless `device` can be used here ("cpu" always can).
void CheckDeviceUsable(const Device& device);

// Device memory (cudaMalloc), freed by the returned owner. Host devices get
// 64-byte aligned host memory.
std::shared_ptr<std::byte> AllocateOn(const Device& device, size_t bytes);
// Page-locked host memory when CUDA and a device are present, else 64-byte
// aligned host memory; `pinned` says which.
std::shared_ptr<std::byte> AllocateHostStaging(size_t bytes, bool* pinned = nullptr);

// Copies `bytes` from `src` on `src_device` to `dst` on `dst_device` and
// returns when the copy is done. Any pair of devices.
void CopyMemory(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                size_t bytes);

// `n` elements of dtype `src_dtype` at `src` converted into `dst_dtype` at
// `dst`, both on CUDA device `device`, with ConvertElements' semantics.
// Supported: any pair of f64, f32, f16, bf16 (DeviceConvertible); others
// throw kUnsupported.
bool DeviceConvertible(DType src_dtype, DType dst_dtype);
void ConvertOnDevice(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                     const Device& device);

// Copies queued in order on a side stream of one CUDA device, so a caller
// can overlap them with its own work (writing the previous piece). Each
// Queue* returns a ticket; Wait(t) returns once copy t (and every earlier
// one) is done. Host buffers should be page-locked for the copies to be
// asynchronous.
class AsyncCopy {
 public:
  explicit AsyncCopy(const Device& device);
  ~AsyncCopy();  // waits for queued copies
  AsyncCopy(const AsyncCopy&) = delete;
  AsyncCopy& operator=(const AsyncCopy&) = delete;

  uint64_t QueueToHost(void* host_dst, const void* device_src, size_t bytes);
  uint64_t QueueToDevice(void* device_dst, const void* host_src, size_t bytes);
  void Wait(uint64_t ticket);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace distckpt

#endif  // DISTCKPT_CORE_DEVICE_H_
