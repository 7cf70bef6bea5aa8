// Tensor storage (64-byte aligned, shared) and its copying operations.
#include "core/tensor.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace distckpt {

namespace {

constexpr std::align_val_t kAlignment{64};

size_t ByteSize(DType dtype, const Shape& shape) {
  size_t bytes;
  if (__builtin_mul_overflow(static_cast<size_t>(Volume(shape)), DTypeSize(dtype), &bytes)) {
    Fail(ErrorKind::kInvalidArgument, "a {} tensor of shape {} does not fit in memory",
         DTypeName(dtype), ShapeToString(shape));
  }
  return bytes;
}

void CheckDefined(const Tensor& tensor, std::string_view operation) {
  if (!tensor.defined()) Fail(ErrorKind::kInvalidArgument, "{} of an undefined tensor", operation);
}

}  // namespace

Tensor Tensor::Empty(DType dtype, Shape shape) {
  return Empty(dtype, std::move(shape), Device::Cpu());
}

Tensor Tensor::Empty(DType dtype, Shape shape, const Device& device) {
  const size_t bytes = ByteSize(dtype, shape);
  Tensor tensor;
  tensor.dtype_ = dtype;
  tensor.device_ = device;
  tensor.shape_ = std::move(shape);
  // A distinct non-null pointer even for 0 bytes.
  tensor.storage_ = AllocateOn(device, bytes);
  return tensor;
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor tensor = Empty(dtype, std::move(shape));
  std::memset(tensor.data(), 0, tensor.nbytes());  // all-zero bits are 0 in every dtype
  return tensor;
}

Tensor Tensor::Wrap(void* data, DType dtype, Shape shape, const Device& device) {
  const size_t bytes = ByteSize(dtype, shape);
  if (data == nullptr) {
    if (bytes != 0) {
      Fail(ErrorKind::kInvalidArgument, "Tensor::Wrap of a null pointer for shape {}",
           ShapeToString(shape));
    }
    // A wrapped empty buffer (e.g. an empty vector's data()) is still defined.
    alignas(64) static std::byte empty_buffer[64];
    data = empty_buffer;
  }
  Tensor tensor;
  tensor.dtype_ = dtype;
  tensor.device_ = device;
  tensor.shape_ = std::move(shape);
  // Aliasing constructor with no owner: a non-null pointer that owns nothing.
  tensor.storage_ =
      std::shared_ptr<std::byte>(std::shared_ptr<std::byte>(), static_cast<std::byte*>(data));
  return tensor;
}

Tensor Tensor::Reshape(Shape shape) const {
  CheckDefined(*this, "Reshape");
  if (Volume(shape) != numel()) {
    Fail(ErrorKind::kInvalidArgument, "cannot reshape a tensor of shape {} ({} elements) to {}",
         ShapeToString(shape_), numel(), ShapeToString(shape));
  }
  Tensor tensor = *this;
  tensor.shape_ = std::move(shape);
  return tensor;
}

Tensor Tensor::Clone() const {
  if (!defined()) return Tensor();
  Tensor copy = Empty(dtype_, shape_, device_);
  copy.CopyFrom(*this);
  return copy;
}

Tensor Tensor::To(const Device& device) const {
  if (!defined() || device == device_) return *this;
  Tensor copy = Empty(dtype_, shape_, device);
  copy.CopyFrom(*this);
  return copy;
}

void Tensor::CopyFrom(const Tensor& src) {
  CheckDefined(*this, "CopyFrom into");
  CheckDefined(src, "CopyFrom");
  if (src.nbytes() != nbytes()) {
    Fail(ErrorKind::kInvalidArgument, "CopyFrom of {} bytes into a tensor of {} bytes",
         src.nbytes(), nbytes());
  }
  CopyMemory(raw_data(), device_, src.raw_data(), src.device_, nbytes());
}

void Tensor::FailHostAccess() const {
  Fail(ErrorKind::kUnsupported,
       "a {} tensor of shape {} is on {}: this operation reads host memory (copy it with "
       "Tensor::To(Device::Cpu()) first)",
       DTypeName(dtype_), ShapeToString(shape_), device_.ToString());
}

Tensor Tensor::Slice(const Box& box) const {
  CheckDefined(*this, "Slice");
  const Box whole{Shape(shape_.size(), 0), shape_};
  if (box.rank() != whole.rank() || !Contains(whole, box)) {
    Fail(ErrorKind::kInvalidArgument, "slice {} is outside a tensor of shape {}", box.ToString(),
         ShapeToString(shape_));
  }
  Tensor slice = Empty(dtype_, box.shape);
  const size_t elem = DTypeSize(dtype_);
  const std::byte* src = data();
  std::byte* dst = slice.data();
  ForEachCopyRun(whole, std::nullopt, box, std::nullopt, box, [&](const CopyRun& run) {
    std::memcpy(dst + run.b_index * elem, src + run.a_index * elem, run.count * elem);
  });
  return slice;
}

Tensor Tensor::FlatSlice(const FlatRange& range) const {
  CheckDefined(*this, "FlatSlice");
  if (range.start < 0 || range.start > range.stop || range.stop > numel()) {
    Fail(ErrorKind::kInvalidArgument, "flat range [{}, {}) is outside a tensor of {} elements",
         range.start, range.stop, numel());
  }
  Tensor slice = Empty(dtype_, {range.size()});
  const size_t elem = DTypeSize(dtype_);
  std::memcpy(slice.data(), data() + range.start * elem, range.size() * elem);
  return slice;
}

bool Tensor::Equals(const Tensor& other) const {
  if (defined() != other.defined()) return false;
  if (!defined()) return true;
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(data(), other.data(), nbytes()) == 0;
}

}  // namespace distckpt
