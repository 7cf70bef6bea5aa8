#include "harness/expand/values.h"

#include <cstring>
#include <vector>

namespace distckpt {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool IsE4M3Finite(uint8_t code) { return (code & 0x7f) != 0x7f; }
bool IsE5M2Finite(uint8_t code) { return (code & 0x7c) != 0x7c; }

// Multi-index of linear element `i` of `box` (row-major), in global coordinates.
void GlobalPosition(const Box& box, int64_t i, Shape& pos) {
  pos.resize(box.rank());
  for (size_t d = box.rank(); d-- > 0;) {
    int64_t extent = box.shape[d];
    pos[d] = box.offset[d] + (extent ? i % extent : 0);
    i = extent ? i / extent : 0;
  }
}

// Linear index in `shape`, or -1 when pos lies outside it (padding).
int64_t LinearIndex(const Shape& shape, const Shape& pos) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (pos[d] >= shape[d]) return -1;
    index = index * shape[d] + pos[d];
  }
  return index;
}

// Calls fn(local element index, global multi-index, logical linear index or -1).
template <typename Fn>
void ForEachElement(const ShardLocation& where, Fn&& fn) {
  int64_t begin = where.flat ? where.flat->start : 0;
  int64_t end = where.flat ? where.flat->stop : where.box.volume();
  Shape pos;
  for (int64_t i = begin; i < end; ++i) {
    GlobalPosition(where.box, i, pos);
    fn(i - begin, pos, LinearIndex(where.logical_shape, pos));
  }
}

}  // namespace

uint64_t KeyHash(const std::string& key) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
  return h;
}

void GenerateElement(uint64_t seed, uint64_t key_hash, int64_t index, DType dtype, std::byte* dst) {
  uint64_t h = Mix(Mix(seed ^ key_hash) ^ static_cast<uint64_t>(index));
  switch (dtype) {
    case DType::kF64:
      StoreFromDouble(dst, dtype, 0, (static_cast<int64_t>(h % (1u << 20)) - (1 << 19)) / 16.0);
      return;
    case DType::kF32:
      StoreFromDouble(dst, dtype, 0, (static_cast<int64_t>(h % (1u << 20)) - (1 << 19)) / 16.0);
      return;
    case DType::kF16:
      StoreFromDouble(dst, dtype, 0, (static_cast<int64_t>(h % 4097) - 2048) / 8.0);
      return;
    case DType::kBF16:
      StoreFromDouble(dst, dtype, 0, (static_cast<int64_t>(h % 513) - 256) / 4.0);
      return;
    case DType::kF8E4M3FN: {
      uint8_t code = static_cast<uint8_t>(h);
      if (!IsE4M3Finite(code)) code &= 0xf0;
      std::memcpy(dst, &code, 1);
      return;
    }
    case DType::kF8E5M2: {
      uint8_t code = static_cast<uint8_t>(h);
      if (!IsE5M2Finite(code)) code &= 0x83;
      std::memcpy(dst, &code, 1);
      return;
    }
    case DType::kBool: {
      uint8_t b = h & 1;
      std::memcpy(dst, &b, 1);
      return;
    }
    default:  // integers: the low bytes of h (little-endian), uniform over the type
      std::memcpy(dst, &h, DTypeSize(dtype));
      return;
  }
}

nlohmann::json ObjectValue(const std::string& key, uint64_t seed, const Shape& offset) {
  uint64_t h = KeyHash(key) ^ Mix(seed);
  for (int64_t o : offset) h = Mix(h ^ static_cast<uint64_t>(o));
  return {{"key", key}, {"offset", offset}, {"value", h >> 11}};
}

void FillShard(uint64_t seed, const std::string& key, const ShardLocation& where, Tensor& dst) {
  const uint64_t kh = KeyHash(key);
  const size_t size = DTypeSize(dst.dtype());
  std::byte* out = dst.data();
  ForEachElement(where, [&](int64_t local, const Shape&, int64_t index) {
    std::byte* p = out + static_cast<size_t>(local) * size;
    if (index < 0)
      std::memset(p, 0, size);
    else
      GenerateElement(seed, kh, index, dst.dtype(), p);
  });
}

void FillIndexCodes(const ShardLocation& where, Tensor& dst) {
  auto* out = dst.data_as<uint8_t>();
  ForEachElement(where, [&](int64_t local, const Shape&, int64_t index) {
    out[local] = index < 0 ? 0 : static_cast<uint8_t>(index % 256);
  });
}

std::optional<ValueMismatch> CheckShard(uint64_t seed, const std::string& key, DType stored_dtype,
                                        const ShardLocation& where, const Tensor& actual) {
  const uint64_t kh = KeyHash(key);
  const size_t size = DTypeSize(actual.dtype());
  std::byte generated[8];
  std::byte expected[8];
  std::optional<ValueMismatch> first;
  int64_t count = 0;
  ForEachElement(where, [&](int64_t local, const Shape& pos, int64_t index) {
    if (index < 0) {
      std::memset(expected, 0, size);
    } else {
      GenerateElement(seed, kh, index, stored_dtype, generated);
      ConvertElements(generated, stored_dtype, expected, actual.dtype(), 1);
    }
    const std::byte* got = actual.data() + static_cast<size_t>(local) * size;
    if (std::memcmp(got, expected, size) == 0) return;
    // Generated values are never NaN, so bitwise comparison is exact.
    ++count;
    if (!first) {
      first = ValueMismatch{index, pos, LoadAsDouble(expected, actual.dtype(), 0),
                            LoadAsDouble(got, actual.dtype(), 0), 0};
    }
  });
  if (first) first->count = count;
  return first;
}

}  // namespace distckpt
