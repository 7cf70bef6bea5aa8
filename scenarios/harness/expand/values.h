// Deterministic element values: every element is a pure function of
// (seed, key, global linear index, dtype), exactly representable in its
// dtype, so any rank can check any shard without a reference copy (the
// nccl-tests "verifiable" idea).
//
// Float values are small multiples of powers of two (f32: n/16 with
// |n| < 2^19; f16: n/8, |n| <= 2048; bf16: n/4, |n| <= 256); fp8 values are
// random finite codes; integers are uniform over the type; bool is a coin.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_VALUES_H_
#define DISTCKPT_SCENARIO_VALUES_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/box.h"
#include "core/tensor.h"

namespace distckpt {

uint64_t KeyHash(const std::string& key);
// Writes the element for (seed, key_hash, index) into `dst` (DTypeSize bytes).
void GenerateElement(uint64_t seed, uint64_t key_hash, int64_t index, DType dtype, std::byte* dst);

// Describes where a shard's elements sit in the logical global tensor.
// `logical_shape` is the unpadded shape: elements at indices beyond it (vocab
// padding rows) are zero. `box` is the shard's global box (prepended axes of
// size 1 included) and `flat` an optional flattened range of it.
struct ShardLocation {
  Shape logical_shape;
  Box box;
  std::optional<FlatRange> flat;
};

// Fills `dst` (dtype = generated dtype) with the expected values of the shard.
void FillShard(uint64_t seed, const std::string& key, const ShardLocation& where, Tensor& dst);

// Fills `dst` (a 1-byte dtype, e.g. fp8) with every element's logical linear
// index mod 256 (0 in padding): a tensor of >= 256 elements holds every code.
void FillIndexCodes(const ShardLocation& where, Tensor& dst);

// The value of the ShardedObject `key` at grid offset `offset`.
nlohmann::json ObjectValue(const std::string& key, uint64_t seed, const Shape& offset);

struct ValueMismatch {
  int64_t global_index = -1;  // linear index in the logical (or padded, if outside) tensor
  Shape position;             // global multi-index
  double expected = 0, actual = 0;
  int64_t count = 0;  // mismatching elements
};

// Checks `actual` against the values generated in `stored_dtype` and then
// converted to actual's dtype (what a load converting dtypes must produce).
// Returns nullopt when every element matches bit-exactly.
std::optional<ValueMismatch> CheckShard(uint64_t seed, const std::string& key, DType stored_dtype,
                                        const ShardLocation& where, const Tensor& actual);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_VALUES_H_
