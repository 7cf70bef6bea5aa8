// Tensor: a dense, contiguous, row-major buffer with a dtype and shape, in
// host memory (the default) or on a CUDA device (core/device.h).
//
// Copies share storage (like torch.Tensor); Clone() makes a deep copy. An
// undefined Tensor (default-constructed) has no storage; every other Tensor,
// even one with no elements, has. Buffers are 64-byte aligned. Tensor::Wrap
// adopts caller memory without owning it. Shapes and boxes that do not fit
// throw CheckpointError(kInvalidArgument).
//
// The element accessors (data(), bytes(), At, Slice, Equals...) read host
// memory: on a device tensor they throw kUnsupported naming the device, so
// host-only code fails clearly instead of dereferencing device memory.
// Device-aware code uses raw_data(), To(), CopyFrom() and Clone().
//
// Thread-safety: distinct Tensors may be used concurrently; concurrent writes
// to shared storage need external synchronization.
#ifndef DISTCKPT_CORE_TENSOR_H_
#define DISTCKPT_CORE_TENSOR_H_

#include <cstddef>
#include <memory>
#include <span>

#include "core/box.h"
#include "core/device.h"
#include "core/dtype.h"

namespace distckpt {

class Tensor {
 public:
  Tensor() = default;
  static Tensor Empty(DType dtype, Shape shape);  // uninitialised, host
  static Tensor Empty(DType dtype, Shape shape, const Device& device);
  static Tensor Zeros(DType dtype, Shape shape);
  // Non-owning view of caller memory of at least Volume(shape) * DTypeSize(dtype)
  // bytes, on `device`.
  static Tensor Wrap(void* data, DType dtype, Shape shape, const Device& device = Device::Cpu());

  bool defined() const { return storage_ != nullptr; }
  const Device& device() const { return device_; }
  bool on_cuda() const { return device_.is_cuda(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return Volume(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  size_t ndim() const { return shape_.size(); }

  std::byte* data() {
    if (device_.is_cuda()) [[unlikely]]
      FailHostAccess();
    return storage_.get();
  }
  const std::byte* data() const {
    if (device_.is_cuda()) [[unlikely]]
      FailHostAccess();
    return storage_.get();
  }
  // The storage wherever it lives (a device pointer for a device tensor).
  std::byte* raw_data() { return storage_.get(); }
  const std::byte* raw_data() const { return storage_.get(); }
  std::span<std::byte> bytes() { return {data(), nbytes()}; }
  std::span<const std::byte> bytes() const { return {data(), nbytes()}; }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }

  // Same storage, new shape of equal volume.
  Tensor Reshape(Shape shape) const;
  Tensor Clone() const;  // on the same device
  // A copy on `device` (this tensor itself when it is already there).
  Tensor To(const Device& device) const;
  // Copies `src`'s bytes into this tensor's storage, between any devices;
  // throws kInvalidArgument unless both are defined with equal byte sizes.
  void CopyFrom(const Tensor& src);
  // A copy of the sub-box `box` (offsets relative to this tensor).
  Tensor Slice(const Box& box) const;
  // A 1-d copy of elements [range.start, range.stop) of the flattening.
  Tensor FlatSlice(const FlatRange& range) const;
  // Element i (row-major) as double, with the dtype's cast semantics.
  double At(int64_t i) const { return LoadAsDouble(data(), dtype_, static_cast<size_t>(i)); }
  // Bitwise equality of dtype, shape and bytes.
  bool Equals(const Tensor& other) const;

 private:
  [[noreturn]] void FailHostAccess() const;

  DType dtype_ = DType::kF32;
  Device device_;
  Shape shape_;
  std::shared_ptr<std::byte> storage_;  // null iff undefined; never null otherwise
};

}  // namespace distckpt

#endif  // DISTCKPT_CORE_TENSOR_H_
