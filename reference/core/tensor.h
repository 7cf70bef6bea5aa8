// Tensor: a dense, contiguous, row-major, host buffer with a dtype and shape.
//
// Copies share storage (like torch.Tensor); Clone() makes a deep copy. An
// undefined Tensor (default-constructed) has no storage; every other Tensor,
// even one with no elements, has. Buffers are 64-byte aligned. Tensor::Wrap
// adopts caller memory without owning it. Shapes and boxes that do not fit
// throw CheckpointError(kInvalidArgument).
//
// Thread-safety: distinct Tensors may be used concurrently; concurrent writes
// to shared storage need external synchronization.
#ifndef DISTCKPT_CORE_TENSOR_H_
#define DISTCKPT_CORE_TENSOR_H_

#include <cstddef>
#include <memory>
#include <span>

#include "core/box.h"
#include "core/dtype.h"

namespace distckpt {

class Tensor {
 public:
  Tensor() = default;
  static Tensor Empty(DType dtype, Shape shape);  // uninitialised
  static Tensor Zeros(DType dtype, Shape shape);
  // Non-owning view of caller memory of at least Volume(shape) * DTypeSize(dtype) bytes.
  static Tensor Wrap(void* data, DType dtype, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return Volume(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  size_t ndim() const { return shape_.size(); }

  std::byte* data() { return storage_.get(); }
  const std::byte* data() const { return storage_.get(); }
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
  Tensor Clone() const;
  // A copy of the sub-box `box` (offsets relative to this tensor).
  Tensor Slice(const Box& box) const;
  // A 1-d copy of elements [range.start, range.stop) of the flattening.
  Tensor FlatSlice(const FlatRange& range) const;
  // Element i (row-major) as double, with the dtype's cast semantics.
  double At(int64_t i) const { return LoadAsDouble(data(), dtype_, static_cast<size_t>(i)); }
  // Bitwise equality of dtype, shape and bytes.
  bool Equals(const Tensor& other) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<std::byte> storage_;  // null iff undefined; never null otherwise
};

}  // namespace distckpt

#endif  // DISTCKPT_CORE_TENSOR_H_
