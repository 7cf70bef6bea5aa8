#include "harness/fp8_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "fp8/quantize.h"
#include "harness/expand_tensor.h"
#include "harness/values.h"

namespace distckpt {
namespace {

using nlohmann::json;

DType Fp8DType(const json& v, const std::string& path) {
  std::optional<DType> d = v.is_string() ? ParseDType(v.get<std::string>()) : std::nullopt;
  if (!d || !IsFp8(*d))
    Fail(ErrorKind::kInvalidArgument, "{}: expected fp8_e4m3fn or fp8_e5m2", path);
  return *d;
}

float PositiveScale(const json& v, const std::string& path) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0) {
    Fail(ErrorKind::kInvalidArgument, "{}: expected a finite positive number", path);
  }
  return v.get<float>();
}

Fp8Storage ParseStorage(const json& v, const std::string& path) {
  if (v == "dequantized") return Fp8Storage::kDequantized;
  if (v == "raw") return Fp8Storage::kRaw;
  Fail(ErrorKind::kInvalidArgument, "{}: expected \"dequantized\" or \"raw\"", path);
}

// One entry: the fp8 fields are taken out, the rest is a tensor spec.
Fp8TensorSpec ParseEntry(json v, const std::string& path, Fp8Storage storage) {
  if (!v.is_object()) Fail(ErrorKind::kInvalidArgument, "{}: expected an object", path);
  Fp8TensorSpec out;
  out.fp8.storage = storage;
  auto take = [&](const char* field, auto&& parse) {
    if (!v.contains(field)) return;
    parse(v.at(field), path + "." + field);
    v.erase(field);
  };
  take("format", [&](const json& f, const std::string& p) { out.fp8.format = Fp8DType(f, p); });
  take("scale", [&](const json& f, const std::string& p) { out.fp8.scale = PositiveScale(f, p); });
  take("storage",
       [&](const json& f, const std::string& p) { out.fp8.storage = ParseStorage(f, p); });
  take("values", [&](const json& f, const std::string& p) {
    if (f != "random" && f != "all_codes") {
      Fail(ErrorKind::kInvalidArgument, "{}: expected \"random\" or \"all_codes\"", p);
    }
    out.fp8.all_codes = f == "all_codes";
  });
  take("load_scale",
       [&](const json& f, const std::string& p) { out.fp8.load_scale = PositiveScale(f, p); });
  take("expect_saturated", [&](const json& f, const std::string& p) {
    if (!f.is_number_integer() || f.get<int64_t>() < 0) {
      Fail(ErrorKind::kInvalidArgument, "{}: expected a non-negative integer", p);
    }
    out.fp8.expect_saturated = f.get<int64_t>();
  });
  if (!v.contains("dtype")) v["dtype"] = "bf16";
  out.tensor = ParseTensorSpec(v, path);
  if (!out.tensor.stack.empty()) {
    Fail(ErrorKind::kInvalidArgument, "{}.stack: fp8 tensors with prepended axes are not supported",
         path);
  }
  DType nominal = out.tensor.dtype;
  if (!IsFloatingPoint(nominal) || IsFp8(nominal)) {
    Fail(ErrorKind::kInvalidArgument, "{}.dtype: the nominal dtype must be f64, f32, f16 or bf16",
         path);
  }
  if (out.tensor.load_dtype && !IsFloatingPoint(*out.tensor.load_dtype)) {
    Fail(ErrorKind::kInvalidArgument, "{}.load_dtype: expected a float or fp8 dtype", path);
  }
  return out;
}

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

std::vector<Fp8TensorSpec> ParseFp8Section(const json& v, const std::string& path) {
  if (!v.is_object()) Fail(ErrorKind::kInvalidArgument, "{}: expected an object", path);
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "storage" && it.key() != "tensors") {
      Fail(ErrorKind::kInvalidArgument, "{}: unknown field '{}'", path, it.key());
    }
  }
  Fp8Storage storage = v.contains("storage") ? ParseStorage(v.at("storage"), path + ".storage")
                                             : Fp8Storage::kDequantized;
  if (!v.contains("tensors") || !v.at("tensors").is_array()) {
    Fail(ErrorKind::kInvalidArgument, "{}.tensors: expected an array", path);
  }
  std::vector<Fp8TensorSpec> out;
  std::set<std::string> keys;
  for (size_t i = 0; i < v.at("tensors").size(); ++i) {
    std::string p = fmt::format("{}.tensors[{}]", path, i);
    out.push_back(ParseEntry(v.at("tensors")[i], p, storage));
    if (!keys.insert(out.back().tensor.key).second) {
      Fail(ErrorKind::kInvalidArgument, "{}: duplicate fp8 key '{}'", p, out.back().tensor.key);
    }
  }
  return out;
}

json Fp8SectionToJson(const std::vector<Fp8TensorSpec>& section) {
  json tensors = json::array();
  for (const Fp8TensorSpec& e : section) {
    json j = TensorSpecToJson(e.tensor);
    j["format"] = std::string(DTypeName(e.fp8.format));
    j["scale"] = e.fp8.scale;
    j["storage"] = e.fp8.storage == Fp8Storage::kRaw ? "raw" : "dequantized";
    if (e.fp8.all_codes) j["values"] = "all_codes";
    if (e.fp8.load_scale) j["load_scale"] = *e.fp8.load_scale;
    if (e.fp8.expect_saturated) j["expect_saturated"] = *e.fp8.expect_saturated;
    tensors.push_back(std::move(j));
  }
  return {{"tensors", tensors}};
}

void CheckFp8Keys(const Scenario& s) {
  std::set<std::string> keys;
  for (const TensorSpec& t : s.tensors) keys.insert(t.key);
  for (const Fp8TensorSpec& f : s.fp8) {
    for (const std::string& k : {f.tensor.key, ScaleInvKey(f.tensor.key)}) {
      if (keys.count(k)) {
        Fail(ErrorKind::kInvalidArgument, "$.fp8: key '{}' is also a key of $.tensors", k);
      }
    }
  }
}

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
