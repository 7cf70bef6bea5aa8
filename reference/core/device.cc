// Device memory through the CUDA runtime (when built with it), host memory
// otherwise. The kernels for ConvertOnDevice live in device_kernels.cu.
#include "core/device.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>

#include "core/error.h"

#ifdef DISTCKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distckpt {

#ifdef DISTCKPT_HAVE_CUDA
// device_kernels.cu
void LaunchWidenKernel(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                       cudaStream_t stream);
#endif

namespace {

// DISTCKPT_SIMULATE_CUDA=N: N simulated CUDA devices whose memory is host
// memory (copies are memcpy, "kernels" run on the host). Tests run every
// device code path on machines without a GPU with it; real devices are then
// ignored.
int SimulatedDevices() {
  static const int n = [] {
    const char* v = std::getenv("DISTCKPT_SIMULATE_CUDA");
    return v ? std::max(0, std::atoi(v)) : 0;
  }();
  return n;
}

// Out of memory is an error of the request (a checkpoint or scenario naming
// a tensor larger than this machine holds), reported as such, not a
// std::bad_alloc that callers would print as "std::bad_alloc".
std::shared_ptr<std::byte> AllocateHost(size_t bytes) {
  constexpr std::align_val_t kAlignment{64};
  void* p = ::operator new(bytes, kAlignment, std::nothrow);
  if (p == nullptr) {
    Fail(ErrorKind::kIo, "out of memory: cannot allocate {} bytes ({:.1f} GiB) of host memory",
         bytes, static_cast<double>(bytes) / (1 << 30));
  }
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                    [](std::byte* q) { ::operator delete(q, kAlignment); });
}

#ifdef DISTCKPT_HAVE_CUDA
void Check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls are unaffected
  Fail(ErrorKind::kIo, "CUDA: {} failed: {}", what, cudaGetErrorString(status));
}

// Makes `device` current on this thread (ranks may be threads).
void Use(const Device& device) {
  CheckDeviceUsable(device);
  Check(cudaSetDevice(device.index), "cudaSetDevice");
}
#endif

}  // namespace

Device Device::Parse(std::string_view text) {
  if (text == "cpu") return Cpu();
  if (text == "cuda") return Cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() &&
        index >= 0) {
      return Cuda(index);
    }
  }
  Fail(ErrorKind::kInvalidArgument, "unknown device '{}' (cpu, cuda or cuda:N)", text);
}

std::string Device::ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

bool CudaBuilt() {
#ifdef DISTCKPT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
  if (SimulatedDevices() > 0) return SimulatedDevices();
#ifdef DISTCKPT_HAVE_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

bool CudaSimulated() { return SimulatedDevices() > 0; }

void CheckDeviceUsable(const Device& device) {
  if (device.is_cpu()) return;
  if (!CudaBuilt() && SimulatedDevices() == 0) {
    Fail(ErrorKind::kUnsupported, "device {}: this build of distckpt has no CUDA support",
         device.ToString());
  }
  const int count = CudaDeviceCount();
  if (device.index >= count) {
    Fail(ErrorKind::kUnsupported, "device {}: this machine has {} CUDA device(s)",
         device.ToString(), count);
  }
}

std::shared_ptr<std::byte> AllocateOn(const Device& device, size_t bytes) {
  if (device.is_cpu()) return AllocateHost(bytes);
  if (SimulatedDevices() > 0) {
    CheckDeviceUsable(device);
    return AllocateHost(bytes);
  }
#ifdef DISTCKPT_HAVE_CUDA
  Use(device);
  void* p = nullptr;
  Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes),
        fmt::format("cudaMalloc of {} bytes on {}", bytes, device.ToString()));
  const int index = device.index;
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [index](std::byte* q) {
    cudaSetDevice(index);
    cudaFree(q);
  });
#else
  CheckDeviceUsable(device);
  return nullptr;  // unreachable: CheckDeviceUsable threw
#endif
}

std::shared_ptr<std::byte> AllocateHostStaging(size_t bytes, bool* pinned) {
  if (pinned) *pinned = false;
  if (SimulatedDevices() > 0) return AllocateHost(bytes);
#ifdef DISTCKPT_HAVE_CUDA
  void* p = nullptr;
  if (CudaDeviceCount() > 0 &&
      cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault) == cudaSuccess) {
    if (pinned) *pinned = true;
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                      [](std::byte* q) { cudaFreeHost(q); });
  }
  cudaGetLastError();
#endif
  return AllocateHost(bytes);
}

void CopyMemory(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                size_t bytes) {
  if (bytes == 0) return;
  if ((dst_device.is_cpu() && src_device.is_cpu()) || SimulatedDevices() > 0) {
    CheckDeviceUsable(dst_device);
    CheckDeviceUsable(src_device);
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef DISTCKPT_HAVE_CUDA
  Use(dst_device.is_cuda() ? dst_device : src_device);
  cudaMemcpyKind kind = dst_device.is_cpu()   ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDeviceToDevice && dst_device.index != src_device.index) {
    Check(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, bytes), "cudaMemcpyPeer");
    return;
  }
  Check(cudaMemcpy(dst, src, bytes, kind),
        fmt::format("copy of {} bytes {} -> {}", bytes, src_device.ToString(),
                    dst_device.ToString()));
#else
  CheckDeviceUsable(dst_device.is_cuda() ? dst_device : src_device);
#endif
}

bool DeviceConvertible(DType src_dtype, DType dst_dtype) {
  const bool narrow_float =
      src_dtype == DType::kBF16 || src_dtype == DType::kF16 || src_dtype == DType::kF32;
  const bool wide_float = dst_dtype == DType::kF32 || dst_dtype == DType::kF64;
  return narrow_float && wide_float && DTypeSize(dst_dtype) > DTypeSize(src_dtype);
}

void ConvertOnDevice(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n,
                     const Device& device) {
  if (!device.is_cuda() || !DeviceConvertible(src_dtype, dst_dtype)) {
    Fail(ErrorKind::kUnsupported, "no conversion {} -> {} on {}", DTypeName(src_dtype),
         DTypeName(dst_dtype), device.ToString());
  }
  if (SimulatedDevices() > 0) {
    CheckDeviceUsable(device);
    if (n > 0) ConvertElements(src, src_dtype, dst, dst_dtype, n);
    return;
  }
#ifdef DISTCKPT_HAVE_CUDA
  Use(device);
  if (n == 0) return;
  LaunchWidenKernel(src, src_dtype, dst, dst_dtype, n, nullptr);
  Check(cudaGetLastError(), "conversion kernel launch");
  Check(cudaStreamSynchronize(nullptr), "conversion kernel");
#else
  (void)src, (void)dst, (void)n;
#endif
}

#ifdef DISTCKPT_HAVE_CUDA
struct AsyncCopy::State {
  Device device;
  bool simulated = false;
  cudaStream_t stream = nullptr;
  uint64_t next_ticket = 0;
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending;  // oldest first
  std::deque<cudaEvent_t> spare;

  uint64_t Queue(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (simulated) {
      std::memcpy(dst, src, bytes);
      return next_ticket++;
    }
    Use(device);
    Check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
    cudaEvent_t event;
    if (spare.empty()) {
      Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    } else {
      event = spare.front();
      spare.pop_front();
    }
    Check(cudaEventRecord(event, stream), "cudaEventRecord");
    pending.emplace_back(next_ticket, event);
    return next_ticket++;
  }
};

AsyncCopy::AsyncCopy(const Device& device) : state_(std::make_unique<State>()) {
  if (!device.is_cuda()) {
    Fail(ErrorKind::kInvalidArgument, "AsyncCopy needs a CUDA device, got {}", device.ToString());
  }
  state_->device = device;
  state_->simulated = SimulatedDevices() > 0;
  CheckDeviceUsable(device);
  if (state_->simulated) return;
  Use(device);
  Check(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

AsyncCopy::~AsyncCopy() {
  if (state_->simulated) return;
  cudaSetDevice(state_->device.index);
  cudaStreamSynchronize(state_->stream);
  for (auto& [ticket, event] : state_->pending) cudaEventDestroy(event);
  for (cudaEvent_t event : state_->spare) cudaEventDestroy(event);
  cudaStreamDestroy(state_->stream);
}

uint64_t AsyncCopy::QueueToHost(void* host_dst, const void* device_src, size_t bytes) {
  return state_->Queue(host_dst, device_src, bytes, cudaMemcpyDeviceToHost);
}

uint64_t AsyncCopy::QueueToDevice(void* device_dst, const void* host_src, size_t bytes) {
  return state_->Queue(device_dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void AsyncCopy::Wait(uint64_t ticket) {
  while (!state_->pending.empty() && state_->pending.front().first <= ticket) {
    cudaEvent_t event = state_->pending.front().second;
    state_->pending.pop_front();
    const cudaError_t status = cudaEventSynchronize(event);
    state_->spare.push_back(event);
    Check(status, "an asynchronous device copy");
  }
}
#else
// Without CUDA only simulated devices exist: copies happen at once.
struct AsyncCopy::State {
  uint64_t next_ticket = 0;
};
AsyncCopy::AsyncCopy(const Device& device) : state_(std::make_unique<State>()) {
  CheckDeviceUsable(device.is_cuda() ? device : Device::Cuda());
}
AsyncCopy::~AsyncCopy() = default;
uint64_t AsyncCopy::QueueToHost(void* host_dst, const void* device_src, size_t bytes) {
  std::memcpy(host_dst, device_src, bytes);
  return state_->next_ticket++;
}
uint64_t AsyncCopy::QueueToDevice(void* device_dst, const void* host_src, size_t bytes) {
  std::memcpy(device_dst, host_src, bytes);
  return state_->next_ticket++;
}
void AsyncCopy::Wait(uint64_t) {}
#endif

}  // namespace distckpt
