#include "harness/expand/fp8_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "fp8/quantize.h"
#include "harness/expand/expand_tensor.h"
#include "harness/expand/values.h"

namespace distckpt {
namespace {

// The replicated (1,)-shaped companion holding scale_inv.
ShardedTensor ScaleInvShard(const std::string& key, const Topology& topo, int rank) {
  TensorSpec spec;
  spec.key = ScaleInvKey(key);
  spec.shape = {1};
  spec.dtype = DType::kF32;
  return ExpandTensor(spec, topo, rank).front();
}

ShardedTensor WithData(ShardedTensor t, Tensor data) {
  t.dtype = data.dtype();
  t.data = std::move(data);
  return t;
}

// The generated codes of `shard`.
Tensor Codes(const Scenario& s, const Fp8TensorSpec& spec, const ShardedTensor& shard) {
  Tensor codes = Tensor::Empty(spec.fp8.format, shard.DataShape());
  ShardLocation where = LocationOf(spec.tensor.shape, shard);
  if (spec.fp8.all_codes) {
    FillIndexCodes(where, codes);
  } else {
    FillShard(s.seed, spec.tensor.key, where, codes);
  }
  return codes;
}

// What the checkpoint stores for `codes`.
Tensor Stored(const Fp8TensorSpec& spec, const Tensor& codes) {
  if (spec.fp8.storage == Fp8Storage::kRaw) return codes;
  return DequantizeFp8(codes, 1.0f / spec.fp8.scale, spec.tensor.dtype);
}

DType Target(const Fp8TensorSpec& spec) {
  return spec.tensor.load_dtype.value_or(spec.tensor.dtype);
}

// The dtype the engine loads into: the stored codes (raw), or the float
// target (dequantized; the nominal dtype when the target is fp8).
DType RequestDType(const Fp8TensorSpec& spec) {
  if (spec.fp8.storage == Fp8Storage::kRaw) return spec.fp8.format;
  return IsFp8(Target(spec)) ? spec.tensor.dtype : Target(spec);
}

Tensor Converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::Empty(dtype, t.shape());
  ConvertElements(t.data(), t.dtype(), out.data(), dtype, static_cast<size_t>(t.numel()));
  return out;
}

// The request's value from what the engine loaded, counting saturation.
Tensor Deliver(const Fp8TensorSpec& spec, const Tensor& loaded, float scale_inv,
               int64_t& saturated) {
  const DType target = Target(spec);
  const float load_scale = spec.fp8.load_scale.value_or(spec.fp8.scale);
  if (spec.fp8.storage == Fp8Storage::kRaw) {
    if (!IsFp8(target)) return DequantizeFp8(loaded, scale_inv, target);
    if (target == spec.fp8.format && load_scale == spec.fp8.scale)
      return loaded;  // bit-exact codes
    Fp8Quantized q = QuantizeFp8(DequantizeFp8(loaded, scale_inv, DType::kF32), target, load_scale);
    saturated += q.saturated;
    return q.codes;
  }
  if (!IsFp8(target)) return loaded;
  Fp8Quantized q = QuantizeFp8(loaded, target, load_scale);
  saturated += q.saturated;
  return q.codes;
}

const Tensor* LoadedTensor(const Node* fp8, const std::string& key) {
  const Dict* d = fp8 ? fp8->get_if<Dict>() : nullptr;
  auto it = d ? d->find(key) : Dict::const_iterator();
  return d && it != d->end() ? it->second.get_if<Tensor>() : nullptr;
}

std::string Element(const Tensor& t, int64_t i) {
  if (IsFp8(t.dtype())) return fmt::format("code 0x{:02x}", t.data_as<uint8_t>()[i]);
  return fmt::format("{}", t.At(i));
}

}  // namespace

Node BuildFp8SaveState(const Scenario& s, const Topology& topo, int rank) {
  Dict out;
  for (const Fp8TensorSpec& spec : s.fp8) {
    ShardedTensor shard = ExpandTensor(spec.tensor, topo, rank).front();
    out[spec.tensor.key] = Node(WithData(shard, Stored(spec, Codes(s, spec, shard))));
    if (spec.fp8.storage == Fp8Storage::kRaw) {
      Tensor scale_inv = Tensor::Empty(DType::kF32, {1});
      scale_inv.data_as<float>()[0] = 1.0f / spec.fp8.scale;
      out[ScaleInvKey(spec.tensor.key)] =
          Node(WithData(ScaleInvShard(spec.tensor.key, topo, rank), scale_inv));
    }
  }
  return Node(std::move(out));
}

Node BuildFp8Request(const Scenario& s, const PairSpec* pair, const Topology& topo, int rank) {
  Dict out;
  for (const Fp8TensorSpec& spec : s.fp8) {
    if (pair && pair->Drops(spec.tensor.key, rank)) continue;
    ShardedTensor shard = ExpandTensor(spec.tensor, topo, rank).front();
    Tensor data = Tensor::Empty(RequestDType(spec), shard.DataShape());
    out[spec.tensor.key] = Node(WithData(shard, std::move(data)));
    if (spec.fp8.storage == Fp8Storage::kRaw) {
      out[ScaleInvKey(spec.tensor.key)] = Node(
          WithData(ScaleInvShard(spec.tensor.key, topo, rank), Tensor::Empty(DType::kF32, {1})));
    }
  }
  return Node(std::move(out));
}

Fp8Check CheckFp8Loaded(const Scenario& s, const PairSpec* pair, const Topology& topo, int rank,
                        Node& loaded) {
  Fp8Check check;
  check.saturated.assign(s.fp8.size(), 0);
  Node* fp8 = nullptr;
  if (Dict* root = loaded.get_if<Dict>(); root && root->count("fp8")) fp8 = &root->at("fp8");
  for (size_t i = 0; i < s.fp8.size(); ++i) {
    const Fp8TensorSpec& spec = s.fp8[i];
    const std::string& key = spec.tensor.key;
    if (pair && pair->Drops(key, rank)) continue;
    const Tensor* got = LoadedTensor(fp8, key);
    const Tensor* scale_inv = LoadedTensor(fp8, ScaleInvKey(key));
    ShardedTensor shard = ExpandTensor(spec.tensor, topo, rank).front();
    if (shard.flattened_range && shard.flattened_range->size() == 0) {
      // Load drops a request whose flattened range is empty (docs/megatron-semantics.md §1.8).
      if (got) {
        check.error = fmt::format(
            "fp8 key '{}' has an empty flattened range on rank {}, which load drops, "
            "but it is in the loaded state",
            key, rank);
        return check;
      }
      continue;
    }
    if (!got || (spec.fp8.storage == Fp8Storage::kRaw && !scale_inv)) {
      check.error = fmt::format("fp8 key '{}' missing from the loaded state (rank {})", key, rank);
      return check;
    }
    int64_t saturated = 0, ignored = 0;
    float loaded_scale_inv = scale_inv ? scale_inv->data_as<float>()[0] : 1.0f / spec.fp8.scale;
    Tensor actual = Deliver(spec, *got, loaded_scale_inv, saturated);
    Tensor expected =
        Deliver(spec, Converted(Stored(spec, Codes(s, spec, shard)), RequestDType(spec)),
                1.0f / spec.fp8.scale, ignored);
    if (IsMainReplica(shard.replica_id)) check.saturated[i] = saturated;
    fp8->operator[](key) = Node(actual);
    if (actual.dtype() != expected.dtype() || actual.nbytes() != expected.nbytes()) {
      check.error = fmt::format("fp8 key '{}' (rank {}): loaded {} {}, expected {} {}", key, rank,
                                DTypeName(actual.dtype()), ShapeToString(actual.shape()),
                                DTypeName(expected.dtype()), ShapeToString(expected.shape()));
      return check;
    }
    const size_t size = DTypeSize(actual.dtype());
    int64_t first = -1, count = 0;
    for (int64_t e = 0; e < actual.numel(); ++e) {
      if (std::memcmp(actual.data() + e * size, expected.data() + e * size, size) == 0) continue;
      if (first < 0) first = e;
      ++count;
    }
    if (count > 0 && !check.error) {
      check.error = fmt::format(
          "fp8 key '{}' (rank {}, shard at {}): element {}: expected {}, got {} ({} elements "
          "differ)",
          key, rank, ShapeToString(shard.global_offset), first, Element(expected, first),
          Element(actual, first), count);
    }
  }
  return check;
}

std::optional<std::string> CheckFp8Saturation(const Scenario& s,
                                              const std::vector<int64_t>& totals) {
  for (size_t i = 0; i < s.fp8.size() && i < totals.size(); ++i) {
    const std::optional<int64_t>& want = s.fp8[i].fp8.expect_saturated;
    if (want && *want != totals[i]) {
      return fmt::format("fp8 key '{}': {} values saturated, expected {}", s.fp8[i].tensor.key,
                         totals[i], *want);
    }
  }
  return std::nullopt;
}

}  // namespace distckpt
