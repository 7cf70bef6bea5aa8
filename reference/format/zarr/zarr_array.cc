#include "format/zarr/zarr_array.h"

#include <fmt/format.h>

#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"

namespace distckpt {
namespace {

// numpy's dtype strings for what distckpt holds (little-endian; one-byte
// types have no byte order, "|"), and Megatron's "bfloat16".
constexpr std::array<std::pair<std::string_view, DType>, 10> kZarrDTypes = {{
    {"<f8", DType::kF64},
    {"<f4", DType::kF32},
    {"<f2", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"|i1", DType::kI8},
    {"<i2", DType::kI16},
    {"<i4", DType::kI32},
    {"<i8", DType::kI64},
    {"|u1", DType::kU8},
    {"|b1", DType::kBool},
}};

constexpr std::array<std::string_view, 9> kFields = {
    "zarr_format", "shape",      "chunks",
    "dtype",       "compressor", "fill_value",
    "order",       "filters",    "dimension_separator",
};

// At most this many axes (numpy's limit is 64; a tensor has a handful).
constexpr size_t kMaxAxes = 32;

[[noreturn]] void Bad(ErrorKind kind, const std::string& path, std::string_view field,
                      const std::string& why) {
  Fail(kind, "{}: field '{}': {}", path, field, why);
}

const nlohmann::json& Field(const nlohmann::json& j, std::string_view field,
                            const std::string& path) {
  auto it = j.find(field);
  if (it == j.end()) Bad(ErrorKind::kCorruption, path, field, "missing");
  return *it;
}

Shape ParseAxes(const nlohmann::json& j, std::string_view field, int64_t least,
                const std::string& path) {
  if (!j.is_array()) Bad(ErrorKind::kCorruption, path, field, "not a list: " + j.dump());
  if (j.size() > kMaxAxes) {
    Bad(ErrorKind::kUnsupported, path, field,
        fmt::format("{} axes (distckpt reads at most {})", j.size(), kMaxAxes));
  }
  Shape out;
  for (const nlohmann::json& v : j) {
    // is_number_integer: unsigned too; -0.0 or 2.5 are not integers.
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
      Bad(ErrorKind::kCorruption, path, field, "not a list of integers: " + j.dump());
    }
    const int64_t n = v.get<int64_t>();
    if (n < least) {
      Bad(ErrorKind::kCorruption, path, field,
          fmt::format("{} is below {}: {}", n, least, j.dump()));
    }
    out.push_back(n);
  }
  return out;
}

// a * b, or nullopt past 2^62 (room for byte counts and offsets).
std::optional<uint64_t> Mul(uint64_t a, uint64_t b) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  if (a != 0 && b > kLimit / a) return std::nullopt;
  return a * b;
}

}  // namespace

std::string_view ZarrDTypeName(DType dtype) {
  for (const auto& [name, d] : kZarrDTypes) {
    if (d == dtype) return name;
  }
  Fail(ErrorKind::kUnsupported, "dtype {} has no Zarr name in Megatron's zarr backend",
       DTypeName(dtype));
}

Shape ZarrArray::GridShape() const {
  Shape grid(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) grid[i] = (shape[i] + chunks[i] - 1) / chunks[i];
  return grid;
}

uint64_t ZarrArray::NumChunks() const {
  uint64_t n = 1;
  for (int64_t g : GridShape()) n *= static_cast<uint64_t>(g);  // bounded by ParseZarray
  return n;
}

uint64_t ZarrArray::ChunkFileBytes() const {
  return static_cast<uint64_t>(Volume(chunks)) * DTypeSize(dtype);  // bounded by ParseZarray
}

Box ZarrArray::ChunkBox(const Shape& index) const {
  Box box{Shape(shape.size()), Shape(shape.size())};
  for (size_t i = 0; i < shape.size(); ++i) {
    box.offset[i] = index[i] * chunks[i];
    box.shape[i] = std::min(chunks[i], shape[i] - box.offset[i]);
  }
  return box;
}

std::string ZarrArray::ChunkKey(const Shape& index) {
  if (index.empty()) return "0";
  std::string key;
  for (size_t i = 0; i < index.size(); ++i) {
    if (i) key += '.';
    key += std::to_string(index[i]);
  }
  return key;
}

ZarrArray ParseZarray(std::string_view text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Fail(ErrorKind::kCorruption, "{}: not valid JSON", path);
  if (!j.is_object()) Fail(ErrorKind::kCorruption, "{}: not a JSON object", path);
  for (const auto& [name, value] : j.items()) {
    bool known = false;
    for (std::string_view f : kFields) known = known || f == name;
    if (!known) {
      Bad(ErrorKind::kUnsupported, path, name,
          "not a field of the .zarray Megatron's zarr backend writes");
    }
  }
  const nlohmann::json& format = Field(j, "zarr_format", path);
  if (format != 2) {
    Bad(ErrorKind::kUnsupported, path, "zarr_format",
        format.dump() + " (distckpt reads Zarr version 2, which Megatron-Core wrote)");
  }
  ZarrArray a;
  a.shape = ParseAxes(Field(j, "shape", path), "shape", 0, path);
  a.chunks = ParseAxes(Field(j, "chunks", path), "chunks", 1, path);
  if (a.chunks.size() != a.shape.size()) {
    Bad(ErrorKind::kCorruption, path, "chunks",
        fmt::format("{} axes, but shape has {}", a.chunks.size(), a.shape.size()));
  }
  const nlohmann::json& dtype = Field(j, "dtype", path);
  bool found = false;
  for (const auto& [name, d] : kZarrDTypes) {
    if (dtype.is_string() && dtype.get<std::string>() == name) {
      a.dtype = d;
      found = true;
    }
  }
  if (!found) {
    Bad(ErrorKind::kUnsupported, path, "dtype",
        fmt::format("{} is not a dtype Megatron's zarr backend writes (<f8, <f4, <f2, bfloat16, "
                    "|i1, <i2, <i4, <i8, |u1, |b1)",
                    dtype.dump()));
  }
  const nlohmann::json& compressor = Field(j, "compressor", path);
  if (!compressor.is_null()) {
    Bad(ErrorKind::kUnsupported, path, "compressor",
        compressor.dump() + " (distckpt reads uncompressed arrays: Megatron writes null)");
  }
  const nlohmann::json& filters = Field(j, "filters", path);
  if (!filters.is_null()) {
    Bad(ErrorKind::kUnsupported, path, "filters",
        filters.dump() + " (distckpt reads arrays without filters: Megatron writes null)");
  }
  const nlohmann::json& order = Field(j, "order", path);
  if (order != "C") {
    Bad(ErrorKind::kUnsupported, path, "order",
        order.dump() + " (distckpt reads C order, which Megatron writes)");
  }
  // Never used: every chunk is stored (Megatron writes empty chunks too).
  const nlohmann::json& fill = Field(j, "fill_value", path);
  const bool fill_ok = fill.is_null() || fill.is_number() || fill.is_boolean() || fill == "NaN" ||
                       fill == "Infinity" || fill == "-Infinity";
  if (!fill_ok) {
    Bad(ErrorKind::kCorruption, path, "fill_value",
        fill.dump() + " (expected null, a number, a bool, \"NaN\", \"Infinity\" or \"-Infinity\")");
  }
  auto separator = j.find("dimension_separator");
  if (separator != j.end() && *separator != ".") {
    Bad(ErrorKind::kUnsupported, path, "dimension_separator",
        separator->dump() + " (distckpt reads chunk files named i.j.k, Megatron's \".\")");
  }
  // Sizes: every count and byte offset of the array fits in 62 bits.
  std::optional<uint64_t> cell = DTypeSize(a.dtype);
  std::optional<uint64_t> chunks = 1;
  std::optional<uint64_t> bytes = DTypeSize(a.dtype);
  for (size_t i = 0; i < a.shape.size(); ++i) {
    const uint64_t grid = static_cast<uint64_t>((a.shape[i] + a.chunks[i] - 1) / a.chunks[i]);
    if (cell) cell = Mul(*cell, static_cast<uint64_t>(a.chunks[i]));
    if (chunks) chunks = Mul(*chunks, grid);
    if (bytes) bytes = Mul(*bytes, static_cast<uint64_t>(a.shape[i]));
  }
  if (!cell) Bad(ErrorKind::kCorruption, path, "chunks", "one chunk holds more than 2^62 bytes");
  if (!chunks || !bytes || !Mul(*chunks, *cell)) {
    Bad(ErrorKind::kCorruption, path, "shape", "the array holds more than 2^62 bytes");
  }
  return a;
}

}  // namespace distckpt
