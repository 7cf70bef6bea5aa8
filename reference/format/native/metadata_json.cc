#include "format/native/metadata_json.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "format/native/block_checksums.h"
#include "format/native/json_text.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

using nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A JSON value under parse, with its path ("tensors[\"w\"].chunks[0].file")
// so that every error names the field. The path is built only on failure,
// from links to the parent Fields (which outlive their children: every
// child is made and used within its parent's scope).
class Field {
 public:
  Field(const json& value, const std::string& source) : value_(value), source_(source) {}

  const json& value() const { return value_; }

  [[noreturn]] void Fail(std::string_view problem) const {
    std::string path = Path();
    distckpt::Fail(ErrorKind::kCorruption, "{}: {}: {}", source_, path.empty() ? "top level" : path,
                   problem);
  }

  Field Member(const char* name) const {
    Expect(value_.is_object(), "an object");
    auto it = value_.find(name);
    if (it == value_.end()) Field(value_, this, name).Fail("missing");
    return Field(*it, this, name);
  }
  bool Has(const char* name) const { return value_.is_object() && value_.contains(name); }

  // Fails on a member not in `names` (every format change bumps the version).
  void OnlyMembers(std::initializer_list<std::string_view> names) const {
    Expect(value_.is_object(), "an object");
    for (const auto& [key, member] : value_.items()) {
      if (std::find(names.begin(), names.end(), key) == names.end()) {
        Fail(fmt::format("unexpected field '{}'", key));
      }
    }
  }

  template <typename Fn>  // fn(Field element)
  void ForEachElement(Fn&& fn) const {
    Expect(value_.is_array(), "an array");
    for (size_t i = 0; i < value_.size(); ++i) {
      Field element(value_[i], this, nullptr);
      element.index_ = i;
      fn(element);
    }
  }
  template <typename Fn>  // fn(const std::string& key, Field value)
  void ForEachEntry(Fn&& fn) const {
    Expect(value_.is_object(), "an object");
    for (const auto& [key, member] : value_.items()) {
      Field entry(member, this, nullptr);
      entry.key_ = &key;
      fn(key, entry);
    }
  }

  std::string String() const {
    Expect(value_.is_string(), "a string");
    return value_.get<std::string>();
  }
  int64_t Int(int64_t min, int64_t max) const {
    Expect(value_.is_number_integer(), "an integer");
    bool in_range = value_.is_number_unsigned()
                        ? value_.get<uint64_t>() <= static_cast<uint64_t>(max)
                        : value_.get<int64_t>() >= min && value_.get<int64_t>() <= max;
    if (!in_range) Fail(fmt::format("{} is out of range [{}, {}]", value_.dump(), min, max));
    return value_.get<int64_t>();
  }
  uint64_t Size() const { return static_cast<uint64_t>(Int(0, kInt64Max)); }
  Shape ShapeOf(int64_t min_dim) const {
    Shape shape;
    ForEachElement([&](const Field& dim) { shape.push_back(dim.Int(min_dim, kInt64Max)); });
    return shape;
  }

 private:
  void Expect(bool ok, const char* what) const {
    if (!ok) Fail(fmt::format("expected {}, got {}", what, value_.type_name()));
  }

  Field(const json& value, const Field* parent, const char* name)
      : value_(value), source_(parent->source_), parent_(parent), name_(name) {}

  std::string Path() const {
    if (parent_ == nullptr) return "";
    std::string path = parent_->Path();
    if (name_) return path.empty() ? name_ : path + "." + name_;
    if (key_) return fmt::format("{}[{}]", path, json(*key_).dump());
    return fmt::format("{}[{}]", path, index_);
  }

  const json& value_;
  const std::string& source_;
  // How this field hangs off its parent: member name_, entry *key_ or element index_.
  const Field* parent_ = nullptr;
  const char* name_ = nullptr;
  const std::string* key_ = nullptr;
  size_t index_ = 0;
};

std::optional<int64_t> CheckedVolume(const Shape& shape) {
  int64_t volume = 1;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(volume, dim, &volume)) return std::nullopt;
  }
  return volume;
}

// file, byte_offset, length, checksum, rank: shared by chunks and objects.
template <typename Stored>
void LocationToJson(const Stored& stored, json& j) {
  j["file"] = stored.file;
  j["byte_offset"] = stored.offset;
  j["length"] = stored.length;
  if (stored.checksum) j["checksum"] = ChecksumToHex(*stored.checksum);
  if constexpr (std::is_same_v<Stored, StoredChunk>) {
    if (stored.block_size != 0) j["block_size"] = stored.block_size;
    if (stored.sums_checksum) {  // version 3: the block checksums are in the data file
      j["sums_checksum"] = ChecksumToHex(*stored.sums_checksum);
    } else if (stored.block_size != 0) {  // version 2
      j["block_checksums"] = BlockChecksumsToHex(stored.block_checksums);
    }
  }
  j["rank"] = stored.writer_rank;
}

template <typename Stored>
void ParseLocation(const Field& f, Stored& stored) {
  Field file = f.Member("file");
  stored.file = file.String();
  if (stored.file.empty() ||
      stored.file.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos ||
      stored.file.find("..") != std::string::npos) {
    file.Fail(
        fmt::format("'{}' is not a plain file name inside the checkpoint directory", stored.file));
  }
  stored.offset = f.Member("byte_offset").Size();
  Field length = f.Member("length");
  stored.length = length.Size();
  if (stored.offset > static_cast<uint64_t>(kInt64Max) - stored.length) {
    length.Fail("byte range overflows a file offset");
  }
  if (f.Has("checksum")) {
    Field checksum = f.Member("checksum");
    try {
      stored.checksum = ChecksumFromHex(checksum.String());
    } catch (const CheckpointError& e) {
      checksum.Fail(e.what());
    }
  }
  stored.writer_rank = static_cast<int>(f.Member("rank").Int(0, INT_MAX));
}

StoredChunk ParseChunk(const Field& f, const StoredTensor& tensor, int version) {
  if (version >= 3) {
    f.OnlyMembers({"offset", "shape", "flat", "file", "byte_offset", "length", "block_size",
                   "sums_checksum", "rank"});
  } else if (version == 2) {
    f.OnlyMembers({"offset", "shape", "flat", "file", "byte_offset", "length", "block_size",
                   "block_checksums", "rank"});
  } else {
    f.OnlyMembers({"offset", "shape", "flat", "file", "byte_offset", "length", "checksum", "rank"});
  }
  StoredChunk chunk;
  const size_t rank = tensor.global_shape.size();
  auto parse_dims = [&](const char* name) {
    Field field = f.Member(name);
    Shape dims = field.ShapeOf(0);
    if (dims.size() != rank)
      field.Fail(fmt::format("has {} dims, the tensor has {}", dims.size(), rank));
    return dims;
  };
  chunk.box.offset = parse_dims("offset");
  chunk.box.shape = parse_dims("shape");
  for (size_t d = 0; d < rank; ++d) {
    if (chunk.box.offset[d] > tensor.global_shape[d] - chunk.box.shape[d]) {
      f.Fail(fmt::format("chunk {} lies outside global shape {}", chunk.box.ToString(),
                         ShapeToString(tensor.global_shape)));
    }
  }
  if (f.Has("flat")) {
    Field flat = f.Member("flat");
    Shape range = flat.ShapeOf(0);
    if (range.size() != 2 || range[0] > range[1] || range[1] > chunk.box.volume()) {
      flat.Fail(fmt::format("{} is not a [start, stop] range within the chunk's {} elements",
                            flat.value().dump(), chunk.box.volume()));
    }
    chunk.flat = FlatRange{range[0], range[1]};
  }
  ParseLocation(f, chunk);
  // numel <= 2^63 and a dtype takes at most 8 bytes: the product fits in 128 bits.
  const unsigned __int128 expected =
      static_cast<unsigned __int128>(chunk.numel()) * DTypeSize(tensor.dtype);
  if (expected != chunk.length) {
    f.Member("length").Fail(fmt::format("{} bytes, but {} elements of {} take {}", chunk.length,
                                        chunk.numel(), DTypeName(tensor.dtype), expected));
  }
  if (version < 2) return chunk;
  Field block_size = f.Member("block_size");
  chunk.block_size = static_cast<uint64_t>(block_size.Int(1, int64_t{1} << 40));
  if (version >= 3) {
    Field sums = f.Member("sums_checksum");
    try {
      chunk.sums_checksum = ChecksumFromHex(sums.String());
    } catch (const CheckpointError& e) {
      sums.Fail(e.what());
    }
    // The sums follow the payload: their end must be a file offset too.
    const uint64_t room = static_cast<uint64_t>(kInt64Max) - chunk.offset - chunk.length;
    if (BlockCount(chunk.length, chunk.block_size) > room / 8) {
      block_size.Fail("the payload's block checksums after it overflow a file offset");
    }
  } else {  // version 2
    Field checksums = f.Member("block_checksums");
    try {
      chunk.block_checksums = BlockChecksumsFromHex(checksums.String());
    } catch (const CheckpointError& e) {
      checksums.Fail(e.what());
    }
    const uint64_t blocks = BlockCount(chunk.length, chunk.block_size);
    if (chunk.block_checksums.size() != blocks) {
      checksums.Fail(fmt::format("{} checksums, but {} bytes in blocks of {} take {}",
                                 chunk.block_checksums.size(), chunk.length, chunk.block_size,
                                 blocks));
    }
  }
  return chunk;
}

StoredTensor ParseTensor(const std::string& key, const Field& f, int version) {
  f.OnlyMembers({"dtype", "global_shape", "chunks"});
  StoredTensor tensor;
  tensor.key = key;
  Field dtype = f.Member("dtype");
  std::string dtype_name = dtype.String();
  std::optional<DType> parsed = ParseDType(dtype_name);
  if (!parsed) dtype.Fail(fmt::format("unknown dtype '{}'", dtype_name));
  tensor.dtype = *parsed;
  Field global_shape = f.Member("global_shape");
  tensor.global_shape = global_shape.ShapeOf(0);
  if (!CheckedVolume(tensor.global_shape)) global_shape.Fail("volume overflows 64 bits");
  f.Member("chunks").ForEachElement(
      [&](const Field& chunk) { tensor.chunks.push_back(ParseChunk(chunk, tensor, version)); });
  return tensor;
}

StoredObject ParseObject(const std::string& unique_key, const Field& f) {
  f.OnlyMembers({"key", "global_shape", "global_offset", "file", "byte_offset", "length",
                 "checksum", "rank"});
  StoredObject object;
  object.unique_key = unique_key;
  object.key = f.Member("key").String();
  object.global_shape = f.Member("global_shape").ShapeOf(-1);  // -1: Megatron's legacy keys
  Field offset = f.Member("global_offset");
  object.global_offset = offset.ShapeOf(0);
  if (object.global_offset.size() != object.global_shape.size()) {
    offset.Fail(fmt::format("has {} dims, global_shape has {}", object.global_offset.size(),
                            object.global_shape.size()));
  }
  ParseLocation(f, object);
  return object;
}

// An object of scalars and arrays of scalars (a chunk, an object entry).
bool IsFlatRecord(const json& value) {
  if (!value.is_object()) return false;
  for (const json& member : value) {
    if (member.is_object()) return false;
    if (member.is_array() && std::any_of(member.begin(), member.end(),
                                         [](const json& e) { return e.is_structured(); })) {
      return false;
    }
  }
  return true;
}

// Appends `value` laid out as metadata.json is (flat records and short
// values on one line, the rest broken over indented lines) to `out`, and
// returns its compact dump, from which the caller decides its own layout:
// every value is dumped once, bottom up. A container's dump stops growing
// once it is longer than a line (only its length then matters: too long).
std::string Render(const json& value, int depth, std::string& out) {
  constexpr size_t kWidth = 100;
  if (!value.is_structured() || value.empty() || IsFlatRecord(value)) {
    std::string flat;
    AppendJson(value, flat);
    out += flat;
    return flat;
  }
  const bool object = value.is_object();
  std::string flat(1, object ? '{' : '[');
  std::string broken = object ? "{\n" : "[\n";
  std::string key;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it != value.begin()) {
      if (flat.size() <= kWidth) flat += ',';
      broken += ",\n";
    }
    broken.append(2 * (depth + 1), ' ');
    if (object) {
      key.clear();
      AppendJsonString(it.key(), key);
      if (flat.size() <= kWidth) (flat += key) += ':';
      broken += key;
      broken += ": ";
    }
    const std::string member = Render(*it, depth + 1, broken);
    if (flat.size() <= kWidth) flat += member;
  }
  flat += object ? '}' : ']';
  broken += '\n';
  broken.append(2 * depth, ' ');
  broken += object ? '}' : ']';
  out += 2 * static_cast<size_t>(depth) + flat.size() <= kWidth ? flat : broken;
  return flat;
}

// Version 2: xxHash3-64 of the compact dump (nlohmann sorts object keys)
// of the metadata without its metadata_checksum field.
constexpr char kMetadataChecksumField[] = "metadata_checksum";

uint64_t MetadataChecksum(const json& without_checksum) {
  std::string text;
  AppendJson(without_checksum, text);
  return Checksum(std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

json MetadataToJson(const CheckpointMetadata& metadata) {
  json tensors = json::object();
  for (const auto& [key, tensor] : metadata.tensors) {
    // Members assigned one by one: an initializer list copies every value.
    json& t = tensors[key];
    t["dtype"] = DTypeName(tensor.dtype);
    t["global_shape"] = tensor.global_shape;
    json& chunks = t["chunks"] = json::array();
    for (const StoredChunk& chunk : tensor.chunks) {
      json& j = chunks.emplace_back(json::object());
      j["offset"] = chunk.box.offset;
      j["shape"] = chunk.box.shape;
      if (chunk.flat) j["flat"] = json::array({chunk.flat->start, chunk.flat->stop});
      LocationToJson(chunk, j);
    }
  }
  json objects = json::object();
  for (const auto& [unique_key, object] : metadata.objects) {
    json j = {{"key", object.key},
              {"global_shape", object.global_shape},
              {"global_offset", object.global_offset}};
    LocationToJson(object, j);
    objects[unique_key] = std::move(j);
  }
  json j = {{"format", metadata.format},     {"format_version", metadata.format_version},
            {"writer", metadata.writer},     {"topology", metadata.topology},
            {"tensors", std::move(tensors)}, {"objects", std::move(objects)},
            {"common", metadata.common},     {"content", metadata.content}};
  if (metadata.format_version >= 2) j[kMetadataChecksumField] = ChecksumToHex(MetadataChecksum(j));
  return j;
}

CheckpointMetadata MetadataFromJson(const json& j, const std::string& source) {
  Field root(j, source);
  CheckpointMetadata metadata;
  // The version first: a newer file may have fields this version does not know.
  metadata.format_version = static_cast<int>(root.Member("format_version").Int(1, INT_MAX));
  if (metadata.format_version > kNativeFormatVersion) {
    Fail(ErrorKind::kUnsupported,
         "{}: format_version {} is newer than this distckpt reads (up to {}); upgrade distckpt",
         source, metadata.format_version, kNativeFormatVersion);
  }
  if (metadata.format_version >= 2) {
    // Before any other field: a flipped byte anywhere (a swapped offset, a
    // relabelled dtype) is reported as what it is, damage to the file.
    root.OnlyMembers({"format", "format_version", "writer", "topology", "tensors", "objects",
                      "common", "content", kMetadataChecksumField});
    Field stored = root.Member(kMetadataChecksumField);
    uint64_t expected = 0;
    try {
      expected = ChecksumFromHex(stored.String());
    } catch (const CheckpointError& e) {
      stored.Fail(e.what());
    }
    json without = j;
    without.erase(kMetadataChecksumField);
    const uint64_t actual = MetadataChecksum(without);
    if (actual != expected) {
      stored.Fail(
          fmt::format("checksum mismatch: the file's contents hash to {}, {} was stored "
                      "(the metadata is damaged)",
                      ChecksumToHex(actual), ChecksumToHex(expected)));
    }
  } else {
    root.OnlyMembers({"format", "format_version", "writer", "topology", "tensors", "objects",
                      "common", "content"});
  }
  metadata.format = root.Member("format").String();
  metadata.writer = root.Member("writer").String();
  metadata.topology = root.Member("topology").String();
  root.Member("tensors").ForEachEntry([&](const std::string& key, const Field& f) {
    metadata.tensors.emplace(key, ParseTensor(key, f, metadata.format_version));
  });
  root.Member("objects").ForEachEntry([&](const std::string& unique_key, const Field& f) {
    metadata.objects.emplace(unique_key, ParseObject(unique_key, f));
  });
  metadata.common = root.Member("common").value();
  metadata.content = root.Member("content").value();
  return metadata;
}

std::string MetadataToText(const CheckpointMetadata& metadata) {
  std::string text;
  Render(MetadataToJson(metadata), 0, text);
  text += '\n';
  return text;
}

CheckpointMetadata MetadataFromText(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    Fail(ErrorKind::kCorruption, "{}: not valid JSON: {}", source, e.what());
  }
  return MetadataFromJson(j, source);
}

}  // namespace distckpt
