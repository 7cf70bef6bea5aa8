#include "format/native/metadata_json.h"

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "core/json_parse.h"
#include "format/block_checksums.h"
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
    // nlohmann stores a non-negative integer as unsigned: both bounds apply
    // to it too (a block_size or format_version of 0 is out of range).
    bool in_range;
    if (value_.is_number_unsigned()) {
      const uint64_t u = value_.get<uint64_t>();
      in_range = max >= 0 && u <= static_cast<uint64_t>(max) &&
                 (min <= 0 || u >= static_cast<uint64_t>(min));
    } else {
      const int64_t i = value_.get<int64_t>();
      in_range = i >= min && i <= max;
    }
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

StoredChunk ParseChunk(const Field& f, const StoredTensor& tensor, int version,
                       TileCounter& tiles) {
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
    // Version 4: tiles (format/block_layout.h), as many as the shape cuts;
    // version 5 cuts flat chunks into tiles of their rows too.
    chunk.flat_rows = version >= 5;
    if (version >= 4) chunk.tiles = tiles.Tiles(tensor, chunk);
    // The sums follow the payload: their end must be a file offset too.
    const uint64_t room = static_cast<uint64_t>(kInt64Max) - chunk.offset - chunk.length;
    if (SumsBytes(chunk) / 8 > room / 8) {
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

StoredTensor ParseTensor(const std::string& key, const Field& f, int version, TileCounter& tiles) {
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
  f.Member("chunks").ForEachElement([&](const Field& chunk) {
    tensor.chunks.push_back(ParseChunk(chunk, tensor, version, tiles));
  });
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

// Version 2: xxHash3-64 of the compact dump (nlohmann sorts object keys)
// of the metadata without its metadata_checksum field.
constexpr char kMetadataChecksumField[] = "metadata_checksum";

uint64_t MetadataChecksum(const json& without_checksum) {
  std::string text;
  AppendJson(without_checksum, text);
  return Checksum(std::as_bytes(std::span(text.data(), text.size())));
}

// The same of the metadata object `j` with its metadata_checksum member left
// out of the dump (AppendJson's, member by member), without copying the tree.
uint64_t MetadataChecksumLeavingOut(const json& j) {
  std::string text;
  text += '{';
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == kMetadataChecksumField) continue;
    if (!first) text += ',';
    first = false;
    AppendJsonString(it.key(), text);
    text += ':';
    AppendJson(it.value(), text);
  }
  text += '}';
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
    const uint64_t actual = MetadataChecksumLeavingOut(j);
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
  TileCounter tiles;
  root.Member("tensors").ForEachEntry([&](const std::string& key, const Field& f) {
    metadata.tensors.emplace(key, ParseTensor(key, f, metadata.format_version, tiles));
  });
  root.Member("objects").ForEachEntry([&](const std::string& unique_key, const Field& f) {
    metadata.objects.emplace(unique_key, ParseObject(unique_key, f));
  });
  metadata.common = root.Member("common").value();
  metadata.content = root.Member("content").value();
  return metadata;
}

namespace {

// metadata.json written straight from the metadata, without a JSON tree
// (building and dumping one was most of a small save's fixed cost). First
// the compact text (MetadataToJson(metadata).dump(), byte for byte), noting
// where each value that the layout may break over lines starts and ends;
// then the laid-out text, copied from those spans as AppendJsonLaidOut lays
// out the tree.
class MetadataTextWriter {
 public:
  explicit MetadataTextWriter(const CheckpointMetadata& metadata) : md_(metadata) {}

  std::string Write() {
    Compact();
    std::string text;
    text.reserve(compact_.size() + compact_.size() / 4);
    LayOut(0, 0, text);
    text += '\n';
    return text;
  }

 private:
  struct Span {
    size_t begin = 0, end = 0;
  };
  // A value of the compact text, in nodes_ in pre-order: its members (given
  // for a container the layout may break: non-empty, not a flat record)
  // follow it, each with its own members, up to `end`. `tree` for a value
  // kept as JSON (common, content), laid out by AppendJsonLaidOut. (One
  // array for all: a vector of members per node cost an allocation each.)
  struct LayoutNode {
    Span key;  // an object's member: its key as JSON text
    Span text;
    bool object = false;
    const json* tree = nullptr;
    size_t members = 0;
    size_t end = 0;  // one past its last member's nodes
  };

  size_t Mark() const { return compact_.size(); }

  // Appends a member node of node `parent`, filled by fn(its index).
  template <typename Fn>
  void Add(size_t parent, Fn&& fn) {
    const size_t i = nodes_.size();
    nodes_.emplace_back();
    ++nodes_[parent].members;
    fn(i);
    nodes_[i].end = nodes_.size();
  }

  // Appends `"name":` and returns the key's span.
  Span Key(std::string_view name) {
    Span key{Mark(), 0};
    AppendJsonString(name, compact_);
    key.end = Mark();
    compact_ += ':';
    return key;
  }
  template <typename Fn>  // fn(index) appends the value
  void Member(size_t parent, std::string_view name, Fn&& fn) {
    compact_ += nodes_[parent].members == 0 ? '{' : ',';
    Add(parent, [&](size_t i) {
      nodes_[i].key = Key(name);
      nodes_[i].text.begin = Mark();
      fn(i);
      nodes_[i].text.end = Mark();
    });
  }

  template <typename Ints>
  void IntArray(const Ints& values) {
    compact_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) compact_ += ',';
      AppendJsonInteger(values[i], compact_);
    }
    compact_ += ']';
  }
  // An array of integers that is not empty: a container the layout may break.
  void ShapeMembers(const Shape& shape, size_t node) {
    for (size_t i = 0; i < shape.size(); ++i) {
      Add(node, [&](size_t dim) {
        nodes_[dim].text.begin = Mark() + 1;  // after the "[" or ","
        compact_ += i == 0 ? '[' : ',';
        AppendJsonInteger(shape[i], compact_);
        nodes_[dim].text.end = Mark();
      });
    }
    compact_ += ']';
  }
  // `name` is one of the record's fixed field names (no character to escape).
  void Field(bool& first, std::string_view name) {
    const char open[2] = {first ? '{' : ',', '"'};
    compact_.append(open, 2);
    compact_ += name;
    compact_.append("\":", 2);
    first = false;
  }
  void HexField(bool& first, std::string_view name, uint64_t checksum) {
    Field(first, name);
    compact_ += '"';
    AppendChecksumHex(checksum, compact_);
    compact_ += '"';
  }

  // A chunk or object entry: a flat record (one line). Keys in sorted order.
  void Chunk(const StoredChunk& chunk) {
    bool first = true;
    if (!chunk.sums_checksum && chunk.block_size != 0) {  // version 2
      Field(first, "block_checksums");
      AppendJsonString(BlockChecksumsToHex(chunk.block_checksums), compact_);
    }
    if (chunk.block_size != 0) {
      Field(first, "block_size");
      AppendJsonInteger(chunk.block_size, compact_);
    }
    Field(first, "byte_offset");
    AppendJsonInteger(chunk.offset, compact_);
    if (chunk.checksum) HexField(first, "checksum", *chunk.checksum);
    Field(first, "file");
    AppendJsonString(chunk.file, compact_);
    if (chunk.flat) {
      Field(first, "flat");
      IntArray(std::array<int64_t, 2>{chunk.flat->start, chunk.flat->stop});
    }
    Field(first, "length");
    AppendJsonInteger(chunk.length, compact_);
    Field(first, "offset");
    IntArray(chunk.box.offset);
    Field(first, "rank");
    AppendJsonInteger(chunk.writer_rank, compact_);
    Field(first, "shape");
    IntArray(chunk.box.shape);
    if (chunk.sums_checksum) HexField(first, "sums_checksum", *chunk.sums_checksum);
    compact_ += '}';
  }
  void Object(const StoredObject& object) {
    bool first = true;
    Field(first, "byte_offset");
    AppendJsonInteger(object.offset, compact_);
    if (object.checksum) HexField(first, "checksum", *object.checksum);
    Field(first, "file");
    AppendJsonString(object.file, compact_);
    Field(first, "global_offset");
    IntArray(object.global_offset);
    Field(first, "global_shape");
    IntArray(object.global_shape);
    Field(first, "key");
    AppendJsonString(object.key, compact_);
    Field(first, "length");
    AppendJsonInteger(object.length, compact_);
    Field(first, "rank");
    AppendJsonInteger(object.writer_rank, compact_);
    compact_ += '}';
  }

  // {"chunks":[...],"dtype":...,"global_shape":[...]}; a flat record when
  // it has no chunks (its members written, then dropped).
  void Tensor(const StoredTensor& tensor, size_t node) {
    nodes_[node].object = !tensor.chunks.empty();
    Member(node, "chunks", [&](size_t chunks) {
      compact_ += '[';
      for (size_t i = 0; i < tensor.chunks.size(); ++i) {
        if (i > 0) compact_ += ',';
        Add(chunks, [&](size_t record) {
          nodes_[record].text.begin = Mark();
          Chunk(tensor.chunks[i]);
          nodes_[record].text.end = Mark();
        });
      }
      compact_ += ']';
    });
    Member(node, "dtype", [&](size_t) { AppendJsonString(DTypeName(tensor.dtype), compact_); });
    Member(node, "global_shape", [&](size_t shape) {
      if (tensor.global_shape.empty()) {
        compact_ += "[]";
      } else {
        ShapeMembers(tensor.global_shape, shape);
      }
    });
    compact_ += '}';
    if (!nodes_[node].object) {
      nodes_.resize(node + 1);
      nodes_[node].members = 0;
    }
  }

  template <typename Entries, typename Fn>  // fn(value, node)
  void Map(const Entries& map, size_t node, Fn&& fn) {
    nodes_[node].object = true;
    if (map.empty()) compact_ += '{';
    for (const auto& [key, value] : map) {
      Member(node, key, [&](size_t member) { fn(value, member); });
    }
    compact_ += '}';
  }

  void Compact() {
    // About 250 bytes per chunk record and 100 per tensor or object: one
    // allocation for most texts (the common state comes on top); nodes: a
    // record per chunk, 4 and the shape's per tensor, one per object.
    size_t chunks = 0, dims = 0;
    for (const auto& [key, tensor] : md_.tensors) {
      chunks += tensor.chunks.size();
      dims += tensor.global_shape.size();
    }
    compact_.reserve(4096 + 256 * chunks + 128 * (md_.tensors.size() + md_.objects.size()));
    nodes_.reserve(16 + chunks + dims + 4 * md_.tensors.size() + md_.objects.size());
    nodes_.emplace_back();  // the top, node 0
    nodes_[0].object = true;
    auto tree = [&](const json& value) {
      return [&value, this](size_t member) {
        nodes_[member].tree = &value;
        AppendJson(value, compact_);
      };
    };
    auto string = [&](const std::string& value) {
      return [&value, this](size_t) { AppendJsonString(value, compact_); };
    };
    Member(0, "common", tree(md_.common));
    Member(0, "content", tree(md_.content));
    Member(0, "format", string(md_.format));
    Member(0, "format_version", [&](size_t) { AppendJsonInteger(md_.format_version, compact_); });
    // Version 2 on: the checksum of the compact text without this member,
    // filled in once the rest is written.
    Span checksum_field;
    if (md_.format_version >= 2) {
      checksum_field.begin = Mark();
      Member(0, kMetadataChecksumField, [&](size_t) {
        compact_ += '"';
        compact_.append(16, '0');
        compact_ += '"';
      });
      checksum_field.end = Mark();
    }
    Member(0, "objects", [&](size_t objects) {
      Map(md_.objects, objects, [&](const StoredObject& object, size_t) { Object(object); });
    });
    Member(0, "tensors", [&](size_t tensors) {
      Map(md_.tensors, tensors,
          [&](const StoredTensor& tensor, size_t node) { Tensor(tensor, node); });
    });
    Member(0, "topology", string(md_.topology));
    Member(0, "writer", string(md_.writer));
    compact_ += '}';
    nodes_[0].text = {0, Mark()};
    nodes_[0].end = nodes_.size();
    if (md_.format_version >= 2) {
      Checksummer sum;
      sum.Update(std::as_bytes(std::span(compact_.data(), checksum_field.begin)));
      sum.Update(std::as_bytes(
          std::span(compact_.data() + checksum_field.end, compact_.size() - checksum_field.end)));
      const std::string hex = ChecksumToHex(sum.Digest());
      compact_.replace(checksum_field.end - 17, 16, hex);
    }
  }

  void LayOut(size_t index, int depth, std::string& out) const {
    const LayoutNode& node = nodes_[index];
    if (node.tree) {
      AppendJsonLaidOut(*node.tree, depth, out);
      return;
    }
    const size_t size = node.text.end - node.text.begin;
    if (node.members == 0 || 2 * static_cast<size_t>(depth) + size <= kJsonLineWidth) {
      out.append(compact_, node.text.begin, size);
      return;
    }
    out += node.object ? "{\n" : "[\n";
    for (size_t m = index + 1; m < node.end; m = nodes_[m].end) {
      const LayoutNode& member = nodes_[m];
      if (m > index + 1) out += ",\n";
      out.append(2 * static_cast<size_t>(depth + 1), ' ');
      if (node.object) {
        out.append(compact_, member.key.begin, member.key.end - member.key.begin);
        out += ": ";
      }
      LayOut(m, depth + 1, out);
    }
    out += '\n';
    out.append(2 * static_cast<size_t>(depth), ' ');
    out += node.object ? '}' : ']';
  }

  const CheckpointMetadata& md_;
  std::string compact_;
  std::vector<LayoutNode> nodes_;
};

}  // namespace

std::string MetadataToText(const CheckpointMetadata& metadata) {
  return MetadataTextWriter(metadata).Write();
}

CheckpointMetadata MetadataFromText(std::string_view text, const std::string& source) {
  return MetadataFromJson(ParseJson(text, source), source);
}

}  // namespace distckpt
