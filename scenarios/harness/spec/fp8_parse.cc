#include "harness/spec/fp8_parse.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "fp8/quantize.h"

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

}  // namespace distckpt
