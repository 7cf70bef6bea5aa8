// Test helpers shared by the mapping/ tests: small tensors with known values
// and the message of an expected CheckpointError.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MAPPING_TESTING_H_
#define DISTCKPT_MAPPING_TESTING_H_

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace distckpt {

// A tensor of `shape` whose row-major element i holds start + i.
inline Tensor Arange(Shape shape, int64_t start = 0, DType dtype = DType::kI64) {
  Tensor t = Tensor::Empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) StoreFromDouble(t.data(), dtype, i, double(start + i));
  return t;
}

inline std::vector<double> Values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.At(i));
  return out;
}

// The message of the CheckpointError `fn` throws (of kind `kind`); "" and a
// test failure when it throws none.
inline std::string ErrorMessage(ErrorKind kind, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_TESTING_H_
