// .zarray parsing: what Megatron's zarr backend writes is accepted, anything
// else is refused naming the file and the field.
#include "format/zarr/zarr_array.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// zarr 2.13's text for Megatron's zarr.create(..., compressor=None, fill_value=None).
nlohmann::json Megatron() {
  return nlohmann::json::parse(R"({
    "chunks": [1, 24, 16], "compressor": null, "dtype": "bfloat16", "fill_value": null,
    "filters": null, "order": "C", "shape": [4, 48, 16], "zarr_format": 2})");
}

ZarrArray Parse(const nlohmann::json& j) { return ParseZarray(j.dump(), "ck/key/.zarray"); }

TEST(ZarrArrayTest, ParsesWhatMegatronWrites) {
  const ZarrArray a = Parse(Megatron());
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_EQ(a.shape, (Shape{4, 48, 16}));
  EXPECT_EQ(a.chunks, (Shape{1, 24, 16}));
  EXPECT_EQ(a.GridShape(), (Shape{4, 2, 1}));
  EXPECT_EQ(a.NumChunks(), 8u);
  EXPECT_EQ(a.ChunkFileBytes(), 24u * 16 * 2);
  EXPECT_EQ(a.ChunkBox({3, 1, 0}), (Box{{3, 24, 0}, {1, 24, 16}}));
  EXPECT_EQ(ZarrArray::ChunkKey({3, 1, 0}), "3.1.0");
}

TEST(ZarrArrayTest, EveryMegatronDtype) {
  const std::pair<const char*, DType> cases[] = {
      {"<f8", DType::kF64}, {"<f4", DType::kF32}, {"<f2", DType::kF16}, {"bfloat16", DType::kBF16},
      {"|i1", DType::kI8},  {"<i2", DType::kI16}, {"<i4", DType::kI32}, {"<i8", DType::kI64},
      {"|u1", DType::kU8},  {"|b1", DType::kBool}};
  for (const auto& [name, dtype] : cases) {
    nlohmann::json j = Megatron();
    j["dtype"] = name;
    EXPECT_EQ(Parse(j).dtype, dtype) << name;
    EXPECT_EQ(ZarrDTypeName(dtype), name);
  }
}

TEST(ZarrArrayTest, EdgeChunksAndScalars) {
  nlohmann::json j = Megatron();
  j["shape"] = {5, 3};
  j["chunks"] = {2, 3};
  const ZarrArray a = Parse(j);
  EXPECT_EQ(a.GridShape(), (Shape{3, 1}));
  EXPECT_EQ(a.ChunkBox({2, 0}), (Box{{4, 0}, {1, 3}}));  // clipped to the shape
  EXPECT_EQ(a.ChunkFileBytes(), 12u);                    // the file holds the whole cell
  j["shape"] = nlohmann::json::array();
  j["chunks"] = nlohmann::json::array();
  const ZarrArray s = Parse(j);
  EXPECT_EQ(s.NumChunks(), 1u);
  EXPECT_EQ(ZarrArray::ChunkKey({}), "0");
  j["shape"] = {0, 3};
  j["chunks"] = {1, 3};
  EXPECT_EQ(Parse(j).NumChunks(), 0u);
}

TEST(ZarrArrayTest, HostileFieldsAreRefusedNamingFileAndField) {
  struct Case {
    const char* field;
    nlohmann::json value;
    ErrorKind kind;
  };
  const Case cases[] = {
      {"dtype", ">f4", ErrorKind::kUnsupported},  // big-endian
      {"dtype", "<c8", ErrorKind::kUnsupported},
      {"dtype", "<V2", ErrorKind::kUnsupported},  // bf16 without Megatron's patch
      {"dtype", 4, ErrorKind::kUnsupported},
      {"compressor", {{"id", "blosc"}}, ErrorKind::kUnsupported},
      {"filters", nlohmann::json::array({{{"id", "delta"}}}), ErrorKind::kUnsupported},
      {"order", "F", ErrorKind::kUnsupported},
      {"zarr_format", 3, ErrorKind::kUnsupported},
      {"dimension_separator", "/", ErrorKind::kUnsupported},
      {"fill_value", "x", ErrorKind::kCorruption},
      {"fill_value", nlohmann::json::object(), ErrorKind::kCorruption},
      {"shape", {4, -48, 16}, ErrorKind::kCorruption},
      {"shape", {4, 48.5, 16}, ErrorKind::kCorruption},
      {"shape", "4,48,16", ErrorKind::kCorruption},
      {"chunks", {1, 0, 16}, ErrorKind::kCorruption},
      {"chunks", {1, 24}, ErrorKind::kCorruption},  // rank differs from shape
      {"shape", {int64_t{1} << 40, int64_t{1} << 40, 16}, ErrorKind::kCorruption},  // > 2^62 B
      {"chunks", {int64_t{1} << 31, int64_t{1} << 31, 16}, ErrorKind::kCorruption},
      {"attributes", 1, ErrorKind::kUnsupported},  // not a field Megatron writes
  };
  for (const Case& c : cases) {
    nlohmann::json j = Megatron();
    j[c.field] = c.value;
    EXPECT_THAT([&] { Parse(j); },
                ThrowsError(c.kind, std::string("ck/key/.zarray: field '") + c.field + "'"))
        << c.field << " = " << c.value.dump();
  }
  for (const char* field : {"shape", "chunks", "dtype", "compressor", "filters", "order",
                            "fill_value", "zarr_format"}) {
    nlohmann::json j = Megatron();
    j.erase(field);
    EXPECT_THAT([&] { Parse(j); },
                ThrowsError(ErrorKind::kCorruption,
                            std::string("ck/key/.zarray: field '") + field + "': missing"));
  }
  for (const char* text : {"", "{", "[1, 2]", "null", "{\"shape\": [1]"}) {
    EXPECT_THAT([&] { ParseZarray(text, "ck/key/.zarray"); },
                ThrowsError(ErrorKind::kCorruption, "ck/key/.zarray"))
        << text;
  }
}

}  // namespace
}  // namespace distckpt
