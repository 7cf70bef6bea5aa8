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
#include "mapping/sharded_tensor.h"

namespace distckpt {

// A tensor of `shape` whose row-major element i holds start + i.
inline Tensor Arange(Shape shape, int64_t start = 0, DType dtype = DType::kI64) {
  Tensor t = Tensor::Empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) StoreFromDouble(t.data(), dtype, i, double(start + i));
  return t;
}

// Part `part` of `parts` along `axis` (0 or 1) of a 2-D f32 tensor `key` of
// shape `global` whose element (r, c) holds base + r * global[1] + c; every
// value -1 without `with_data` (a destination to load into).
inline ShardedTensor Slab(const std::string& key, const Shape& global, int axis, int part,
                          int parts, bool with_data = true, float base = 0,
                          ReplicaId replica = {0}) {
  Shape local = global;
  local[axis] /= parts;
  Tensor data = Tensor::Empty(DType::kF32, local);
  float* p = data.data_as<float>();
  for (int64_t r = 0; r < local[0]; ++r) {
    for (int64_t c = 0; c < local[1]; ++c) {
      const int64_t gr = axis == 0 ? r + part * local[0] : r;
      const int64_t gc = axis == 1 ? c + part * local[1] : c;
      p[r * local[1] + c] = with_data ? base + static_cast<float>(gr * global[1] + gc) : -1.0f;
    }
  }
  return ShardedTensor::FromRankOffsets(key, data, {{axis, part, parts}}, replica);
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
