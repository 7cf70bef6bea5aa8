#include "wire/messages.h"

#include <iterator>
#include <nlohmann/json.hpp>

#include "wire/codec.h"

namespace distckpt {
namespace {

// Tag bytes, one per message kind.
constexpr uint8_t kShardedMetadataTag = 'L';
constexpr uint8_t kWrittenTag = 'M';
constexpr uint8_t kChecksumsTag = 'C';
constexpr uint8_t kShardTag = 'S';
constexpr uint8_t kShardFailedTag = 'F';

constexpr uint8_t kTensorEntry = 0;
constexpr uint8_t kObjectEntry = 1;

void ExpectTag(WireReader& in, uint8_t tag) {
  const uint8_t got = in.U8();
  if (got != tag) {
    in.Malformed(fmt::format("tag {} where {} was expected", got, tag));
  }
}

DType ReadDType(WireReader& in) {
  const uint8_t v = in.U8();
  if (v >= std::size(kAllDTypes)) in.Malformed(fmt::format("unknown dtype {}", v));
  return static_cast<DType>(v);
}

void WriteOptionalU64(WireWriter& out, const std::optional<uint64_t>& v) {
  out.Bool(v.has_value());
  if (v) out.U64(*v);
}

std::optional<uint64_t> ReadOptionalU64(WireReader& in) {
  if (!in.Bool()) return std::nullopt;
  return in.U64();
}

void WriteFlat(WireWriter& out, const std::optional<FlatRange>& flat) {
  out.Bool(flat.has_value());
  if (flat) {
    out.I64(flat->start);
    out.I64(flat->stop);
  }
}

std::optional<FlatRange> ReadFlat(WireReader& in) {
  if (!in.Bool()) return std::nullopt;
  FlatRange flat;
  flat.start = in.I64();
  flat.stop = in.I64();
  return flat;
}

void WriteJson(WireWriter& out, const nlohmann::json& j) { out.Str(j.dump()); }

nlohmann::json ReadJson(WireReader& in) {
  const std::string text = in.Str();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    in.Malformed(e.what());
  }
}

void WriteChunk(WireWriter& out, const StoredChunk& c) {
  out.I64s(c.box.offset);
  out.I64s(c.box.shape);
  WriteFlat(out, c.flat);
  out.Str(c.file);
  out.U64(c.offset);
  out.U64(c.length);
  WriteOptionalU64(out, c.checksum);
  out.I64(c.writer_rank);
  out.U64(c.block_size);
  out.U64s(c.block_checksums);
  WriteOptionalU64(out, c.sums_checksum);
  out.U64(c.tiles);
  out.Bool(c.flat_rows);
}

StoredChunk ReadChunk(WireReader& in) {
  StoredChunk c;
  c.box.offset = in.I64s();
  c.box.shape = in.I64s();
  c.flat = ReadFlat(in);
  c.file = in.Str();
  c.offset = in.U64();
  c.length = in.U64();
  c.checksum = ReadOptionalU64(in);
  c.writer_rank = static_cast<int>(in.I64());
  c.block_size = in.U64();
  c.block_checksums = in.U64s();
  c.sums_checksum = ReadOptionalU64(in);
  c.tiles = in.U64();
  c.flat_rows = in.Bool();
  return c;
}

void WriteObject(WireWriter& out, const StoredObject& o) {
  out.Str(o.key);
  out.Str(o.unique_key);
  out.I64s(o.global_shape);
  out.I64s(o.global_offset);
  out.Str(o.file);
  out.U64(o.offset);
  out.U64(o.length);
  WriteOptionalU64(out, o.checksum);
  out.I64(o.writer_rank);
}

StoredObject ReadObject(WireReader& in) {
  StoredObject o;
  o.key = in.Str();
  o.unique_key = in.Str();
  o.global_shape = in.I64s();
  o.global_offset = in.I64s();
  o.file = in.Str();
  o.offset = in.U64();
  o.length = in.U64();
  o.checksum = ReadOptionalU64(in);
  o.writer_rank = static_cast<int>(in.I64());
  return o;
}

}  // namespace

std::string EncodeShardedMetadata(const LocalMetadata& metadata) {
  WireWriter out;
  out.U8(kShardedMetadataTag);
  out.U64(metadata.size());
  for (const ShardedMeta& m : metadata) {
    if (const ShardedTensor* t = std::get_if<ShardedTensor>(&m)) {
      out.U8(kTensorEntry);
      out.Str(t->key);
      out.U8(static_cast<uint8_t>(t->dtype));
      out.I64s(t->local_shape);
      out.I64s(t->global_shape);
      out.I64s(t->global_offset);
      out.Bool(t->axis_fragmentations.has_value());
      if (t->axis_fragmentations) out.I64s(*t->axis_fragmentations);
      out.I64s(t->replica_id);
      out.I64(t->prepend_axis_num);
      out.Bool(t->allow_shape_mismatch);
      WriteFlat(out, t->flattened_range);
    } else {
      const ShardedObject& o = std::get<ShardedObject>(m);
      out.U8(kObjectEntry);
      out.Str(o.key);
      out.I64s(o.global_shape);
      out.I64s(o.global_offset);
      out.I64s(o.replica_id);
    }
  }
  return out.Take();
}

LocalMetadata DecodeShardedMetadata(std::string_view message, int from_rank) {
  WireReader in(message, "sharded metadata", from_rank);
  ExpectTag(in, kShardedMetadataTag);
  LocalMetadata metadata(in.Count(1));
  for (ShardedMeta& m : metadata) {
    const uint8_t entry = in.U8();
    if (entry == kTensorEntry) {
      ShardedTensor t;
      t.key = in.Str();
      t.dtype = ReadDType(in);
      t.local_shape = in.I64s();
      t.global_shape = in.I64s();
      t.global_offset = in.I64s();
      if (in.Bool()) t.axis_fragmentations = in.I64s();
      t.replica_id = in.I64s();
      t.prepend_axis_num = static_cast<int>(in.I64());
      t.allow_shape_mismatch = in.Bool();
      t.flattened_range = ReadFlat(in);
      t.ValidateMetadataIntegrity();
      m = std::move(t);
    } else if (entry == kObjectEntry) {
      ShardedObject o;
      o.key = in.Str();
      o.global_shape = in.I64s();
      o.global_offset = in.I64s();
      o.replica_id = in.I64s();
      o.ValidateMetadataIntegrity();
      m = std::move(o);
    } else {
      in.Malformed(fmt::format("unknown entry kind {}", entry));
    }
  }
  in.ExpectEnd();
  return metadata;
}

std::string EncodeWritten(const CheckpointMetadata& metadata) {
  WireWriter out;
  out.U8(kWrittenTag);
  out.Str(metadata.format);
  out.I64(metadata.format_version);
  out.Str(metadata.writer);
  out.Str(metadata.topology);
  out.U64(metadata.tensors.size());
  for (const auto& [key, t] : metadata.tensors) {
    out.Str(t.key);
    out.U8(static_cast<uint8_t>(t.dtype));
    out.I64s(t.global_shape);
    out.U64(t.chunks.size());
    for (const StoredChunk& c : t.chunks) WriteChunk(out, c);
  }
  out.U64(metadata.objects.size());
  for (const auto& [unique_key, o] : metadata.objects) WriteObject(out, o);
  WriteJson(out, metadata.common);
  WriteJson(out, metadata.content);
  return out.Take();
}

std::string EncodeWrittenChecksums(const std::vector<uint64_t>& checksums) {
  WireWriter out;
  out.U8(kChecksumsTag);
  out.U64s(checksums);
  return out.Take();
}

Written DecodeWritten(std::string_view message, int from_rank) {
  WireReader in(message, "written metadata", from_rank);
  Written written;
  const uint8_t tag = in.U8();
  if (tag == kChecksumsTag) {
    written.checksums = in.U64s();
    in.ExpectEnd();
    return written;
  }
  if (tag != kWrittenTag) in.Malformed(fmt::format("unknown tag {}", tag));
  CheckpointMetadata& md = written.metadata.emplace();
  md.format = in.Str();
  md.format_version = static_cast<int>(in.I64());
  md.writer = in.Str();
  md.topology = in.Str();
  for (uint64_t n = in.Count(1); n > 0; --n) {
    StoredTensor t;
    t.key = in.Str();
    t.dtype = ReadDType(in);
    t.global_shape = in.I64s();
    t.chunks.resize(in.Count(1));
    for (StoredChunk& c : t.chunks) c = ReadChunk(in);
    const std::string key = t.key;
    if (!md.tensors.emplace(key, std::move(t)).second) in.Malformed("tensor '" + key + "' twice");
  }
  for (uint64_t n = in.Count(1); n > 0; --n) {
    StoredObject o = ReadObject(in);
    const std::string unique_key = o.unique_key;
    if (!md.objects.emplace(unique_key, std::move(o)).second) {
      in.Malformed("object '" + unique_key + "' twice");
    }
  }
  md.common = ReadJson(in);
  md.content = ReadJson(in);
  in.ExpectEnd();
  return written;
}

std::string EncodeShardHeader(const ShardHeader& header) {
  WireWriter out;
  if (header.failure) {
    out.U8(kShardFailedTag);
    out.U8(static_cast<uint8_t>(header.failure->kind()));
    out.Str(header.failure->what());
  } else {
    out.U8(kShardTag);
    out.U8(static_cast<uint8_t>(header.dtype));
    out.U64(header.nbytes);
  }
  return out.Take();
}

namespace {

ShardHeader ReadShardHeader(WireReader& in) {
  ShardHeader header;
  const uint8_t tag = in.U8();
  if (tag == kShardFailedTag) {
    const auto kind = static_cast<ErrorKind>(in.U8());
    header.failure.emplace(kind, in.Str());
  } else if (tag == kShardTag) {
    header.dtype = ReadDType(in);
    header.nbytes = in.U64();
  } else {
    in.Malformed(fmt::format("unknown tag {}", tag));
  }
  return header;
}

}  // namespace

ShardHeader DecodeShardHeader(std::string_view message, int from_rank) {
  WireReader in(message, "shard header", from_rank);
  ShardHeader header = ReadShardHeader(in);
  in.ExpectEnd();
  return header;
}

std::string EncodeShard(const Tensor& tensor) {
  std::string out = EncodeShardHeader({tensor.dtype(), tensor.nbytes(), std::nullopt});
  if (tensor.nbytes() > 0)
    out.append(reinterpret_cast<const char*>(tensor.data()), tensor.nbytes());
  return out;
}

ShardHeader DecodeShard(std::string_view message, int from_rank,
                        std::span<const std::byte>* bytes) {
  WireReader in(message, "shard", from_rank);
  ShardHeader header = ReadShardHeader(in);
  const size_t header_size = message.size() - in.Remaining();
  if (header.failure) {
    in.ExpectEnd();
    *bytes = {};
    return header;
  }
  if (in.Remaining() != header.nbytes) {
    in.Malformed(fmt::format("{} bytes of shard data where its header says {}", in.Remaining(),
                             header.nbytes));
  }
  *bytes = std::as_bytes(std::span(message.substr(header_size)));
  return header;
}

}  // namespace distckpt
