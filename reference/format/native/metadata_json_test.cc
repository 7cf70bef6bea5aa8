#include "format/native/metadata_json.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <map>
#include <random>

#include "io/checksum.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using nlohmann::json;

StoredChunk Chunk(Box box, std::optional<FlatRange> flat, std::string file, uint64_t offset,
                  uint64_t length, uint64_t checksum, int rank) {
  StoredChunk chunk;
  chunk.box = std::move(box);
  chunk.flat = flat;
  chunk.file = std::move(file);
  chunk.offset = offset;
  chunk.length = length;
  chunk.checksum = checksum;
  chunk.writer_rank = rank;
  return chunk;
}

CheckpointMetadata Example() {
  CheckpointMetadata md;
  md.writer = "distckpt 0.1.0";
  md.topology = "tp=2,pp=1,dp=1";
  StoredTensor& w = md.tensors["decoder.w"];
  w.key = "decoder.w";
  w.dtype = DType::kBF16;
  w.global_shape = {4, 5};
  w.chunks.push_back(
      Chunk({{0, 0}, {2, 5}}, std::nullopt, "__0_0.bin", 0, 20, 0x0123456789abcdefull, 0));
  w.chunks.push_back(Chunk({{2, 0}, {2, 5}}, FlatRange{3, 10}, "__1_0.bin", 64, 14, 42, 1));
  StoredTensor& s = md.tensors["scalar"];
  s.key = "scalar";
  s.dtype = DType::kI64;
  s.chunks.push_back(Chunk({}, std::nullopt, "__0_0.bin", 20, 8, 7, 0));
  StoredObject& o = md.objects["rng/shard_0.1_1.2"];
  o.key = "rng";
  o.unique_key = "rng/shard_0.1_1.2";
  o.global_shape = {1, 2};
  o.global_offset = {0, 1};
  o.file = "__1_0.bin";
  o.length = 64;
  o.checksum = 9;
  o.writer_rank = 1;
  md.common = {{"iteration", 10}, {"args", {{"lr", 0.5}, {"name", "gpt \"x\""}}}};
  md.content = {{"note", "free-form"}};
  return md;
}

TEST(MetadataJsonTest, RoundTrips) {
  const CheckpointMetadata md = Example();
  EXPECT_EQ(MetadataFromJson(MetadataToJson(md), "test"), md);
  EXPECT_EQ(MetadataFromText(MetadataToText(md), "test"), md);
  CheckpointMetadata legacy = md;  // Megatron's legacy object keys carry a -1 dim
  legacy.objects.begin()->second.global_shape = {1, -1};
  legacy.tensors["decoder.w"].chunks[0].checksum.reset();
  EXPECT_EQ(MetadataFromText(MetadataToText(legacy), "test"), legacy);
}

// Pins the on-disk text of format version 1 (still produced for metadata
// that says version 1): a change here breaks version 1 readers.
// Found by the native_metadata fuzzer: nlohmann reports a number too large
// for a double as out_of_range, not parse_error; it aborted the process.
TEST(MetadataJsonTest, NumberOverflowIsCorruptionNotACrash) {
  EXPECT_THAT(
      [] { MetadataFromText(R"({"format": "native", "format_version": 80e2069})", "m.json"); },
      ThrowsError(ErrorKind::kCorruption, "m.json: not valid JSON"));
}

TEST(MetadataJsonTest, TextIsStable) {
  EXPECT_EQ(MetadataToText(Example()), R"({
  "common": {"args":{"lr":0.5,"name":"gpt \"x\""},"iteration":10},
  "content": {"note":"free-form"},
  "format": "native",
  "format_version": 1,
  "objects": {
    "rng/shard_0.1_1.2": {"byte_offset":0,"checksum":"0000000000000009","file":"__1_0.bin","global_offset":[0,1],"global_shape":[1,2],"key":"rng","length":64,"rank":1}
  },
  "tensors": {
    "decoder.w": {
      "chunks": [
        {"byte_offset":0,"checksum":"0123456789abcdef","file":"__0_0.bin","length":20,"offset":[0,0],"rank":0,"shape":[2,5]},
        {"byte_offset":64,"checksum":"000000000000002a","file":"__1_0.bin","flat":[3,10],"length":14,"offset":[2,0],"rank":1,"shape":[2,5]}
      ],
      "dtype": "bf16",
      "global_shape": [4,5]
    },
    "scalar": {
      "chunks": [
        {"byte_offset":20,"checksum":"0000000000000007","file":"__0_0.bin","length":8,"offset":[],"rank":0,"shape":[]}
      ],
      "dtype": "i64",
      "global_shape": []
    }
  },
  "topology": "tp=2,pp=1,dp=1",
  "writer": "distckpt 0.1.0"
}
)");
}

// Example() as format version 2 or 3: blocks of 8 bytes, their checksums
// (version 2) or the checksum of them (version 3).
CheckpointMetadata ExampleWithBlocks(int version) {
  CheckpointMetadata md = Example();
  md.format_version = version;
  for (auto& [key, tensor] : md.tensors) {
    for (StoredChunk& chunk : tensor.chunks) {
      chunk.checksum.reset();
      chunk.block_size = 8;
      if (version >= 3) {
        chunk.sums_checksum = chunk.length;
        continue;
      }
      chunk.block_checksums.assign((chunk.length + 7) / 8, 0);
      for (size_t b = 0; b < chunk.block_checksums.size(); ++b) chunk.block_checksums[b] = b + 1;
    }
  }
  return md;
}
CheckpointMetadata ExampleV2() { return ExampleWithBlocks(2); }
CheckpointMetadata ExampleV3() { return ExampleWithBlocks(3); }

// Recomputes metadata_checksum after an edit (as a tool rewriting the file would).
void Reseal(json& j) {
  j.erase("metadata_checksum");
  const std::string text = j.dump();
  j["metadata_checksum"] =
      ChecksumToHex(Checksum(std::as_bytes(std::span(text.data(), text.size()))));
}

// The layout rule stated naively (dump every value at every level): the
// renderer must produce exactly this text.
std::string NaiveLayout(const json& value, int depth) {
  auto flat_record = [](const json& v) {
    if (!v.is_object()) return false;
    for (const json& m : v) {
      if (m.is_object()) return false;
      for (const json& e : m.is_array() ? m : json::array()) {
        if (e.is_structured()) return false;
      }
    }
    return true;
  };
  const std::string flat = value.dump();
  if (!value.is_structured() || value.empty() || flat_record(value) ||
      2 * static_cast<size_t>(depth) + flat.size() <= 100) {
    return flat;
  }
  std::string out = value.is_object() ? "{\n" : "[\n";
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it != value.begin()) out += ",\n";
    out.append(2 * (depth + 1), ' ');
    if (value.is_object()) out += json(it.key()).dump() + ": ";
    out += NaiveLayout(*it, depth + 1);
  }
  out += '\n';
  out.append(2 * depth, ' ');
  return out + (value.is_object() ? '}' : ']');
}

TEST(MetadataJsonTest, TextFollowsTheLayoutRule) {
  CheckpointMetadata md = Example();
  md.format_version = 1;
  // Keys and values of many widths, so containers fall on both sides of a line.
  for (int i = 0; i < 60; ++i) {
    const std::string key =
        std::string(static_cast<size_t>(i), 'k') + "\u00e9\"" + std::to_string(i);
    StoredTensor& t = md.tensors[key];
    t.key = key;
    t.global_shape = {i + 1};
    t.chunks.push_back(Chunk({{0}, {i + 1}}, std::nullopt, "__0_0.bin", 0, 4 * (i + 1), i, 0));
    md.common["c" + std::to_string(i)] = json::array({i, std::string(static_cast<size_t>(i), 'v')});
    md.common["nested"][std::to_string(i)] = {{"a", json::array({1.5, i})}, {"b", nullptr}};
  }
  for (int i = 80; i < 110; ++i) {  // one array, then one object, per length around a line
    md.content["a" + std::to_string(i)] = json::array({std::string(static_cast<size_t>(i), 'x')});
    md.content["o" + std::to_string(i)]["p"] = {
        json::array({std::string(static_cast<size_t>(i), 'y')})};
  }
  EXPECT_EQ(MetadataToText(md), NaiveLayout(MetadataToJson(md), 0) + "\n");
}

// Random metadata of every version: the text written straight from the
// metadata equals the tree's text under the layout rule, and every case the
// rule distinguishes occurs (counted below).
TEST(MetadataJsonTest, TextWrittenStraightEqualsTheTreeLaidOut) {
  std::mt19937_64 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto text = [&](int max) {
    static const std::vector<std::string> alphabet = {"a",  "z",  ".",      "_", "\"",
                                                      "\\", "\n", "\u00e9", "/", "0"};
    std::string s;
    for (int n = pick(0, max); n > 0; --n) s += alphabet[pick(0, pick(0, 9) < 8 ? 4 : 9)];
    return s;
  };
  auto dims = [&](int max_dims, int64_t min) {
    Shape shape;
    for (int n = pick(0, max_dims); n > 0; --n) {  // dims of 1 to 5 digits: lines of every length
      shape.push_back(pick(0, 9) == 0 ? min : pick(0, std::array{9, 99, 999, 99999}[pick(0, 3)]));
    }
    return shape;
  };
  std::function<json(int)> value = [&](int depth) -> json {
    switch (pick(0, depth > 2 ? 3 : 5)) {
      case 0:
        return pick(-5, 5);
      case 1:
        return text(40);
      case 2:
        return nullptr;
      case 3:
        return 0.25 * pick(0, 9);
      case 4: {
        json a = json::array();
        for (int n = pick(0, 6); n > 0; --n) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int n = pick(0, 6); n > 0; --n) o[text(12)] = value(depth + 1);
        return o;
      }
    }
  };
  std::map<std::string, int> seen;
  for (int round = 0; round < 2000; ++round) {
    CheckpointMetadata md;
    md.format_version = pick(1, 3);
    md.writer = text(20);
    md.topology = text(20);
    if (pick(0, 2) > 0) md.common = value(0);
    if (pick(0, 2) > 0) md.content = value(0);
    for (int t = pick(0, 5); t > 0; --t) {
      const std::string key = text(pick(0, 3) == 0 ? 80 : 12);
      StoredTensor& tensor = md.tensors[key];
      tensor.key = key;
      tensor.dtype = static_cast<DType>(pick(0, 3));
      tensor.global_shape = dims(pick(0, 3) == 0 ? 30 : 3, 1);
      for (int c = pick(0, 4); c > 0; --c) {
        // Short records too, so that a chunks array can fit a line.
        const bool small = pick(0, 2) == 0;
        StoredChunk chunk = Chunk({dims(small ? 1 : 3, 0), dims(small ? 1 : 3, 0)}, std::nullopt,
                                  text(small ? 30 : 10), small ? pick(0, 9) : rng(),
                                  static_cast<uint64_t>(pick(0, 1 << 20)), rng(), pick(0, 70000));
        if (small) chunk.checksum.reset();
        if (!small && pick(0, 2) == 0) chunk.flat = FlatRange{pick(0, 9), pick(10, 99)};
        if (md.format_version >= 2) {
          chunk.checksum.reset();
          chunk.block_size = small ? 0 : static_cast<uint64_t>(pick(0, 2)) << 12;
          if (md.format_version == 3) {
            if (chunk.block_size != 0) chunk.sums_checksum = rng();
          } else {
            for (int b = pick(0, 3); b > 0; --b) chunk.block_checksums.push_back(rng());
          }
        }
        tensor.chunks.push_back(std::move(chunk));
      }
    }
    for (int o = pick(0, 4); o > 0; --o) {
      const std::string unique_key = text(30);
      StoredObject& object = md.objects[unique_key];
      object.unique_key = unique_key;
      object.key = text(20);
      object.global_shape = dims(4, -1);
      object.global_offset = dims(4, 0);
      object.file = text(10);
      object.offset = rng();
      object.length = static_cast<uint64_t>(pick(0, 1000));
      if (pick(0, 1) == 0) object.checksum = rng();
      object.writer_rank = pick(0, 9);
    }
    const std::string written = MetadataToText(md);
    ASSERT_EQ(written, NaiveLayout(MetadataToJson(md), 0) + "\n") << "round " << round;
    // Which cases of the rule this round met.
    const json j = MetadataToJson(md);
    for (const auto& [key, tensor] : j["tensors"].items()) {
      const size_t chunks = tensor["chunks"].size();
      // (A tensor with chunks never fits a line: its smallest text takes 115.)
      ++seen[chunks == 0                                 ? "tensor without chunks"
             : 6 + tensor["chunks"].dump().size() <= 100 ? "chunks on one line"
                                                         : "chunks broken"];
      const size_t chunks_line = 6 + tensor["chunks"].dump().size();
      if (chunks > 0 && chunks_line == 100) ++seen["chunks exactly a line"];
      const size_t shape_line = 6 + tensor["global_shape"].dump().size();
      if (chunks > 0 && shape_line > 100) ++seen["shape broken"];
      if (chunks > 0 && shape_line == 100) ++seen["shape exactly a line"];
    }
    ++seen[j["objects"].empty() ? "no objects" : "objects"];
    if (md.format_version >= 2 && !md.tensors.empty()) ++seen["sealed with tensors"];
  }
  for (const char* c : {"tensor without chunks", "chunks on one line", "chunks broken",
                        "shape broken", "no objects", "objects", "sealed with tensors",
                        "chunks exactly a line", "shape exactly a line"}) {
    EXPECT_GE(seen[c], 3) << c;
  }
}

TEST(MetadataJsonTest, Version2RoundTripsAndIsSealed) {
  const CheckpointMetadata md = ExampleV2();
  EXPECT_EQ(MetadataFromText(MetadataToText(md), "test"), md);
  const json j = MetadataToJson(md);
  EXPECT_EQ(j.at("tensors").at("scalar").at("chunks")[0].at("block_checksums"), "0000000000000001");
  EXPECT_EQ(j.at("tensors").at("decoder.w").at("chunks")[0].at("block_size"), 8);
  EXPECT_EQ(j.at("metadata_checksum").get<std::string>().size(), 16u);
  // White space and key order do not matter.
  EXPECT_EQ(MetadataFromText(j.dump(1), "test"), md);
}

// Issue 15 defect 7: swapping two chunks' offsets or relabelling a dtype of the
// same width in metadata.json went unnoticed.
TEST(MetadataJsonTest, Version2EditsAreCaughtByTheMetadataChecksum) {
  const json sealed = MetadataToJson(ExampleV2());
  json swapped = sealed;
  std::swap(swapped["tensors"]["decoder.w"]["chunks"][0]["offset"],
            swapped["tensors"]["decoder.w"]["chunks"][1]["offset"]);
  EXPECT_THAT([&] { MetadataFromJson(swapped, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: metadata_checksum: checksum mismatch"));
  json relabelled = sealed;
  relabelled["tensors"]["decoder.w"]["dtype"] = "f16";
  EXPECT_THAT([&] { MetadataFromJson(relabelled, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "metadata_checksum: checksum mismatch"));
  json unsealed = sealed;
  unsealed.erase("metadata_checksum");
  EXPECT_THAT([&] { MetadataFromJson(unsealed, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: metadata_checksum: missing"));
  json text_edit = sealed;
  text_edit["common"]["iteration"] = 11;
  EXPECT_THAT([&] { MetadataFromJson(text_edit, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "checksum mismatch"));
  // Only the top-level member is left out of the checksum: one of that
  // name in the common state is sealed like any other value.
  CheckpointMetadata nested = ExampleV2();
  nested.common["metadata_checksum"] = "a value of the common state";
  const json nested_sealed = MetadataToJson(nested);
  EXPECT_EQ(MetadataFromJson(nested_sealed, "m.json"), nested);
  json nested_edit = nested_sealed;
  nested_edit["common"]["metadata_checksum"] = "edited";
  EXPECT_THAT([&] { MetadataFromJson(nested_edit, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: metadata_checksum: checksum mismatch"));
}

// `md` as sealed JSON with field `field` of chunk 0 of "decoder.w" set to
// `value` (or erased), resealed.
json EditedChunk0(const CheckpointMetadata& md, const std::string& field, const json& value,
                  bool erase) {
  json j = MetadataToJson(md);
  json& chunk = j["tensors"]["decoder.w"]["chunks"][0];
  if (erase) {
    chunk.erase(field);
  } else {
    chunk[field] = value;
  }
  Reseal(j);
  return j;
}

TEST(MetadataJsonTest, Version2ChunksNeedTheirBlockChecksums) {
  auto edited = [&](const std::string& field, const json& value, bool erase) {
    return EditedChunk0(ExampleV2(), field, value, erase);
  };
  EXPECT_THAT([&] { MetadataFromJson(edited("block_checksums", "", true), "m"); },
              ThrowsError(ErrorKind::kCorruption, "chunks[0].block_checksums: missing"));
  EXPECT_THAT([&] { MetadataFromJson(edited("block_size", 0, false), "m"); },
              ThrowsError(ErrorKind::kCorruption, "chunks[0].block_size: 0 is out of range"));
  EXPECT_THAT([&] { MetadataFromJson(edited("block_size", 4, false), "m"); },
              ThrowsError(ErrorKind::kCorruption,
                          "chunks[0].block_checksums: 3 checksums, but 20 bytes in blocks of 4 "
                          "take 5"));
  EXPECT_THAT([&] { MetadataFromJson(edited("block_checksums", "00000000000000zz", false), "m"); },
              ThrowsError(ErrorKind::kCorruption, "malformed checksum"));
  EXPECT_THAT([&] { MetadataFromJson(edited("checksum", "0000000000000001", false), "m"); },
              ThrowsError(ErrorKind::kCorruption, "unexpected field 'checksum'"));
}

// Issue 39: parsed text stores a non-negative integer as unsigned, and the
// bounded field reader skipped the lower bound for it: block_size 0 (then a
// division by zero) and format_version 0 passed. From text, resealed.
TEST(MetadataJsonTest, ZeroFieldsFromTextAreOutOfRange) {
  for (const CheckpointMetadata& md : {ExampleV2(), ExampleV3()}) {
    const json zero_block = EditedChunk0(md, "block_size", 0, false);
    EXPECT_THAT(
        [&] { MetadataFromText(zero_block.dump(), "ck/metadata.json"); },
        ThrowsError(ErrorKind::kCorruption,
                    "ck/metadata.json: tensors[\"decoder.w\"].chunks[0].block_size: 0 is out "
                    "of range [1, 1099511627776]"));
    json zero_version = MetadataToJson(md);
    zero_version["format_version"] = 0;
    Reseal(zero_version);
    EXPECT_THAT([&] { MetadataFromText(zero_version.dump(), "m"); },
                ThrowsError(ErrorKind::kCorruption, "m: format_version: 0 is out of range [1, "));
    // The upper bound still holds for unsigned values.
    const json big_rank = EditedChunk0(md, "rank", uint64_t{1} << 40, false);
    EXPECT_THAT(
        [&] { MetadataFromText(big_rank.dump(), "m"); },
        ThrowsError(ErrorKind::kCorruption, "chunks[0].rank: 1099511627776 is out of range"));
  }
}

// Issue 39: ~90,000 levels of nesting (in common) are refused before a
// parse; the recursive copy of such a value overflowed the stack.
TEST(MetadataJsonTest, DeepNestingIsRefusedNamingTheFile) {
  std::string text = MetadataToText(ExampleV3());
  const std::string key = "\"common\": ";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  const std::string deep = std::string(90000, '[') + std::string(90000, ']');
  text.insert(at + key.size(), "{\"deep\": " + deep + ", \"was\": ");
  text.insert(text.find('\n', at), "}");  // closes the object around the old value
  EXPECT_THAT([&] { MetadataFromText(text, "ck/metadata.json"); },
              ThrowsError(ErrorKind::kCorruption,
                          "ck/metadata.json: not valid JSON: arrays and objects nested deeper than "
                          "512 levels"));
}

// Version 3 keeps one checksum per chunk, of the block checksums that the
// data file holds after the payload: O(chunks), not O(bytes).
TEST(MetadataJsonTest, Version3KeepsTheChecksumOfTheBlockChecksums) {
  const CheckpointMetadata md = ExampleV3();
  EXPECT_EQ(MetadataFromText(MetadataToText(md), "test"), md);
  const json j = MetadataToJson(md);
  const json& chunk = j.at("tensors").at("decoder.w").at("chunks")[0];
  EXPECT_EQ(chunk.dump(),
            R"({"block_size":8,"byte_offset":0,"file":"__0_0.bin","length":20,"offset":[0,0],)"
            R"("rank":0,"shape":[2,5],"sums_checksum":"0000000000000014"})");
  EXPECT_EQ(j.at("metadata_checksum").get<std::string>().size(), 16u);
  json swapped = j;  // sealed as version 2 is
  std::swap(swapped["tensors"]["decoder.w"]["chunks"][0]["sums_checksum"],
            swapped["tensors"]["decoder.w"]["chunks"][1]["sums_checksum"]);
  EXPECT_THAT([&] { MetadataFromJson(swapped, "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: metadata_checksum: checksum mismatch"));
}

TEST(MetadataJsonTest, Version3ChunksNeedTheChecksumOfTheirBlockChecksums) {
  auto edited = [&](const std::string& field, const json& value, bool erase) {
    return EditedChunk0(ExampleV3(), field, value, erase);
  };
  EXPECT_THAT([&] { MetadataFromJson(edited("sums_checksum", "", true), "m"); },
              ThrowsError(ErrorKind::kCorruption, "chunks[0].sums_checksum: missing"));
  EXPECT_THAT([&] { MetadataFromJson(edited("sums_checksum", "12", false), "m"); },
              ThrowsError(ErrorKind::kCorruption, "chunks[0].sums_checksum: malformed checksum"));
  EXPECT_THAT([&] { MetadataFromJson(edited("block_size", nullptr, true), "m"); },
              ThrowsError(ErrorKind::kCorruption, "chunks[0].block_size: missing"));
  EXPECT_THAT([&] { MetadataFromJson(edited("block_checksums", "0000000000000001", false), "m"); },
              ThrowsError(ErrorKind::kCorruption, "unexpected field 'block_checksums'"));
  // The block checksums after the payload must end at a file offset too.
  json far = edited("block_size", 1, false);
  // 20 bytes in blocks of 1: 160 bytes of checksums, 100 bytes left before 2^63 - 1.
  far["tensors"]["decoder.w"]["chunks"][0]["byte_offset"] = INT64_MAX - 120;
  Reseal(far);
  EXPECT_THAT([&] { MetadataFromJson(far, "m"); },
              ThrowsError(ErrorKind::kCorruption,
                          "chunks[0].block_size: the payload's block checksums after it overflow"));
}

struct Malformed {
  std::string pointer;  // JSON pointer of the field to change
  json value;           // new value; null with erase = true removes it
  bool erase;
  const char* message;  // expected in the error
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.pointer << " = " << m.value.dump(); }

class MalformedMetadataTest : public testing::TestWithParam<Malformed> {};

TEST_P(MalformedMetadataTest, IsCorruptionNamingTheField) {
  const Malformed& m = GetParam();
  json j = MetadataToJson(Example());
  json::json_pointer pointer(m.pointer);
  if (m.erase) {
    j[pointer.parent_pointer()].erase(pointer.back());
  } else {
    j[pointer] = m.value;
  }
  try {
    MetadataFromJson(j, "/ckpt/metadata.json");
    ADD_FAILURE() << "parsed";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
    EXPECT_THAT(e.what(), testing::StartsWith("/ckpt/metadata.json: "));
    EXPECT_THAT(e.what(), testing::HasSubstr(m.message));
  }
}

const std::string kW = "/tensors/decoder.w";
const std::string kC0 = kW + "/chunks/0";
const std::string kO = "/objects/rng~1shard_0.1_1.2";

INSTANTIATE_TEST_SUITE_P(
    Battery, MalformedMetadataTest,
    testing::Values(
        Malformed{"/format_version", nullptr, true, "format_version: missing"},
        Malformed{"/format_version", "1", false, "format_version: expected an integer, got string"},
        Malformed{"/format_version", 0, false, "format_version: 0 is out of range"},
        Malformed{"/format_version", 1.0, false, "format_version: expected an integer, got number"},
        Malformed{"/format", nullptr, true, "format: missing"},
        Malformed{"/writer", 5, false, "writer: expected a string, got number"},
        Malformed{"/common", nullptr, true, "common: missing"},
        Malformed{"/extra", 1, false, "top level: unexpected field 'extra'"},
        Malformed{"/tensors", json::array(), false, "tensors: expected an object, got array"},
        Malformed{kW + "/dtype", nullptr, true, R"(tensors["decoder.w"].dtype: missing)"},
        Malformed{kW + "/dtype", "f128", false,
                  R"(tensors["decoder.w"].dtype: unknown dtype 'f128')"},
        Malformed{kW + "/global_shape", json::array({-1, 5}), false,
                  R"(tensors["decoder.w"].global_shape[0]: -1 is out of range)"},
        Malformed{kW + "/global_shape", json::array({1ull << 62, 1ull << 62}), false,
                  R"(tensors["decoder.w"].global_shape: volume overflows)"},
        Malformed{kW + "/global_shape", json::array({4, 5, 1}), false,
                  R"(tensors["decoder.w"].chunks[0].offset: has 2 dims, the tensor has 3)"},
        Malformed{kW + "/chunks", json::object(), false, "chunks: expected an array, got object"},
        Malformed{kC0 + "/offset", json::array({3, 0}), false,
                  R"(chunks[0]: chunk [3:5, 0:5] lies outside global shape (4, 5))"},
        Malformed{kC0 + "/shape", json::array({2}), false, "chunks[0].shape: has 1 dims"},
        Malformed{kC0 + "/shape", "2x5", false, "chunks[0].shape: expected an array, got string"},
        Malformed{kC0 + "/length", 21, false,
                  "chunks[0].length: 21 bytes, but 10 elements of bf16 take 20"},
        Malformed{kW + "/chunks/1/length", 20, false, "chunks[1].length: 20 bytes, but 7 elements"},
        Malformed{kC0 + "/length", -20, false, "chunks[0].length: -20 is out of range"},
        Malformed{kC0 + "/byte_offset", 18446744073709551615ull, false,
                  "chunks[0].byte_offset: 18446744073709551615 is out of range"},
        Malformed{kC0 + "/byte_offset", 9223372036854775800ll, false,
                  "chunks[0].length: byte range overflows"},
        Malformed{kC0 + "/byte_offset", 1.5, false, "chunks[0].byte_offset: expected an integer"},
        Malformed{kC0 + "/file", "../x.bin", false, "chunks[0].file: '../x.bin' is not a plain"},
        Malformed{kC0 + "/file", "/abs/x.bin", false, "chunks[0].file: '/abs/x.bin'"},
        Malformed{kC0 + "/file", "..", false, "chunks[0].file: '..'"},
        Malformed{kC0 + "/file", "", false, "chunks[0].file: ''"},
        Malformed{kC0 + "/file", nullptr, false, "chunks[0].file: expected a string, got null"},
        Malformed{kC0 + "/checksum", "xyz", false, "chunks[0].checksum: malformed checksum 'xyz'"},
        Malformed{kC0 + "/rank", -1, false, "chunks[0].rank: -1 is out of range"},
        Malformed{kC0 + "/rank", 1ll << 40, false, "chunks[0].rank: 1099511627776 is out of range"},
        Malformed{kC0 + "/flat", json::array({5, 3}), false, "chunks[0].flat: [5,3] is not a"},
        Malformed{kC0 + "/flat", json::array({0, 11}), false, "within the chunk's 10 elements"},
        Malformed{kC0 + "/flat", json::array({1}), false, "chunks[0].flat: [1] is not a"},
        Malformed{kC0 + "/size", 3, false, "chunks[0]: unexpected field 'size'"},
        Malformed{kO + "/key", nullptr, true, R"(objects["rng/shard_0.1_1.2"].key: missing)"},
        Malformed{kO + "/global_offset", json::array({0}), false,
                  "global_offset: has 1 dims, global_shape has 2"},
        Malformed{kO + "/global_shape", json::array({1, -2}), false,
                  "global_shape[1]: -2 is out of range"},
        Malformed{kO + "/file", "a/b.bin", false, "file: 'a/b.bin' is not a plain"}));

TEST(MetadataJsonTest, TopLevelMustBeAnObject) {
  EXPECT_THAT(
      [] { MetadataFromText("[]", "m.json"); },
      ThrowsError(ErrorKind::kCorruption, "m.json: top level: expected an object, got array"));
  EXPECT_THAT([] { MetadataFromText("{\"format\": ", "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: not valid JSON"));
  EXPECT_THAT([] { MetadataFromText("", "m.json"); },
              ThrowsError(ErrorKind::kCorruption, "m.json: not valid JSON"));
}

TEST(MetadataJsonTest, NewerVersionIsUnsupported) {
  json j = MetadataToJson(Example());
  j["format_version"] = 6;
  j["new_field"] = true;  // versions may add fields: reported as unsupported, not corrupt
  EXPECT_THAT([&] { MetadataFromJson(j, "m.json"); },
              ThrowsError(ErrorKind::kUnsupported,
                          "m.json: format_version 6 is newer than this distckpt reads (up to 5)"));
}

// Any single damaged or removed field either still parses or is a
// CheckpointError; nothing else escapes (no crash, no foreign exception).
TEST(MetadataJsonTest, NeverCrashesOnDamagedFields) {
  const std::vector<json> replacements = {
      nullptr, -1, 0, "x", 1e300, 18446744073709551615ull, json::array(), json::object(), true};
  int failures = 0;
  for (const json& original :
       {MetadataToJson(Example()), MetadataToJson(ExampleV2()), MetadataToJson(ExampleV3())}) {
    auto parse = [&](const json& j) {
      try {
        MetadataFromJson(j, "m.json");
      } catch (const CheckpointError&) {
        ++failures;
      }
    };
    const json leaves = original.flatten();
    for (const auto& [path, leaf] : leaves.items()) {
      json::json_pointer pointer(path);
      for (const json& replacement : replacements) {
        json j = original;
        j[pointer] = replacement;
        if (j.contains("metadata_checksum") && pointer.back() != "metadata_checksum") {
          Reseal(j);  // reach the field checks
        }
        parse(j);
      }
      json j = original;
      json& parent = j[pointer.parent_pointer()];
      if (parent.is_array()) {
        parent.erase(std::stoul(pointer.back()));
      } else {
        parent.erase(pointer.back());
      }
      if (j.contains("metadata_checksum") && pointer.back() != "metadata_checksum") Reseal(j);
      parse(j);
    }
  }
  EXPECT_GT(failures, 300);
}

}  // namespace
}  // namespace distckpt
