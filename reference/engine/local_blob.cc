#include "engine/local_blob.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/json_integer.h"
#include "core/json_parse.h"
#include "core/little_endian.h"
#include "engine/common_state.h"
#include "engine/read_state.h"
#include "io/checksum.h"
#include "mapping/dict_utils.h"
#include "mapping/validation.h"
#include "strategy/distribution.h"

namespace distckpt {
namespace {

using nlohmann::json;

constexpr char kMagic[] = "DCKLOC01";
constexpr size_t kMagicSize = 8;
constexpr int kVersion = 1;

json MetaJson(const ShardedMeta& meta) { return LocalMetadataToJson({meta})[0]; }

template <typename T>
T MetaFromJson(const json& j) {
  return std::get<T>(LocalMetadataFromJson(json::array({j}))[0]);
}

}  // namespace

std::string SerializeLocalState(const Node& state_dict, int64_t iteration, int rank) {
  SavePieces pieces = SavePreprocess(state_dict);
  json header = {{"format", "distckpt-local"},
                 {"version", kVersion},
                 {"iteration", iteration},
                 {"rank", rank},
                 {"common", CommonToJson(pieces.common)},
                 {"tensors", json::array()},
                 {"objects", json::array()}};
  std::string data;
  ForEachLeaf(pieces.sharded, [&](const NodePath& path, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      t->ValidateMetadataIntegrity();
      if (!t->data.defined() && t->LocalNumel() > 0) {
        Fail(ErrorKind::kInvalidArgument, "`data` attr is None for {} (at '{}')", t->ToString(),
             PathToString(path));
      }
      std::span<const std::byte> bytes =
          t->data.defined() ? t->data.bytes() : std::span<const std::byte>();
      header["tensors"].push_back({{"meta", MetaJson(t->WithoutData())},
                                   {"offset", data.size()},
                                   {"length", bytes.size()},
                                   {"checksum", ChecksumToHex(Checksum(bytes))}});
      data.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      header["objects"].push_back({{"meta", MetaJson(o->WithoutData())}, {"value", o->data}});
    }
  });
  const std::string text = header.dump();
  std::string blob(kMagic, kMagicSize);
  AppendLittleEndian(blob, text.size(), 8);
  return blob + text + data;
}

namespace {

Node LoadLocalStateUnchecked(const std::string& blob, const Node& request, int64_t iteration,
                             int rank, LoadSummary* summary, const std::string& what) {
  if (blob.size() < kMagicSize + 8 || blob.compare(0, kMagicSize, kMagic) != 0) {
    Fail(ErrorKind::kCorruption, "{} is not a distckpt local checkpoint", what);
  }
  const uint64_t length = LoadLittleEndian(blob.data() + kMagicSize, 8);
  const size_t data_start = kMagicSize + 8 + length;
  if (length > blob.size() || data_start > blob.size())
    Fail(ErrorKind::kCorruption, "{} is truncated", what);
  const std::string_view header_text = std::string_view(blob).substr(kMagicSize + 8, length);
  CheckJsonDepth(header_text, what);
  json header = json::parse(header_text, nullptr, false);
  // The header's integers: absent, or not an int64_t, reads as -1 (no match).
  auto field = [&](const char* name) -> int64_t {
    if (!header.is_object() || !header.contains(name)) return -1;
    return JsonInteger<int64_t>(header[name], what + ": damaged header: " + name);
  };
  if (!header.is_object() || field("version") != kVersion || field("iteration") != iteration ||
      field("rank") != rank) {
    Fail(ErrorKind::kCorruption, "{}: damaged header, or another rank's or iteration's file", what);
  }
  std::map<ShardId, std::pair<ShardedTensor, const json*>> tensors;
  std::map<std::string, const json*> objects;
  try {
    for (const json& entry : header.at("tensors")) {
      ShardedTensor t = MetaFromJson<ShardedTensor>(entry.at("meta"));
      tensors.emplace(ShardIdOf(t), std::pair{t, &entry});
    }
    for (const json& entry : header.at("objects")) {
      objects.emplace(MetaFromJson<ShardedObject>(entry.at("meta")).UniqueKey(),
                      &entry.at("value"));
    }
  } catch (const CheckpointError& e) {  // a field of the metadata out of type or range
    Fail(ErrorKind::kCorruption, "{}: damaged header: {}", what, e.what());
  }

  LoadPieces pieces = LoadPreprocess(request);
  Node loaded = pieces.sharded();
  ForEachLeaf(loaded, [&](const NodePath&, Node& leaf) {
    if (const ShardedTensor* want = leaf.get_if<ShardedTensor>()) {
      auto it = tensors.find(ShardIdOf(*want));
      if (it == tensors.end()) {
        Fail(ErrorKind::kKeyMismatch, "{} (global offset {}) is not in the {}", want->key,
             ShapeToString(want->global_offset), what);
      }
      const auto& [stored, entry] = it->second;
      if (stored.local_shape != want->local_shape || stored.global_shape != want->global_shape) {
        Fail(ErrorKind::kShapeMismatch, "{}: requested {}, the {} holds {}", want->key,
             want->ToString(), what, stored.ToString());
      }
      const uint64_t offset = JsonInteger<uint64_t>(entry->at("offset"),
                                                    what + ": damaged header: offset"),
                     bytes = JsonInteger<uint64_t>(entry->at("length"),
                                                   what + ": damaged header: length");
      if (offset > blob.size() - data_start || bytes > blob.size() - data_start - offset)
        Fail(ErrorKind::kCorruption, "{} is truncated", what);
      std::span<const std::byte> src(
          reinterpret_cast<const std::byte*>(blob.data()) + data_start + offset, bytes);
      if (ChecksumToHex(Checksum(src)) != entry->at("checksum").get<std::string>()) {
        Fail(ErrorKind::kCorruption, "{}: checksum mismatch in {}", what, want->key);
      }
      const Shape shape = want->DataShape();
      Tensor dst = want->data.defined() ? want->data : Tensor::Empty(want->dtype, shape);
      if (bytes != static_cast<uint64_t>(dst.numel()) * DTypeSize(stored.dtype)) {
        Fail(ErrorKind::kCorruption, "{}: {} holds {} bytes, not the {} of its shape", what,
             want->key, bytes, static_cast<uint64_t>(dst.numel()) * DTypeSize(stored.dtype));
      }
      ConvertElements(src.data(), stored.dtype, dst.data(), dst.dtype(),
                      static_cast<size_t>(dst.numel()));
      if (summary) {
        summary->bytes_needed += bytes;
        summary->bytes_loaded += dst.nbytes();
        ++summary->chunks_verified;
      }
      leaf = Node(dst);
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      auto it = objects.find(o->UniqueKey());
      if (it == objects.end())
        Fail(ErrorKind::kKeyMismatch, "{} is not in the {}", o->UniqueKey(), what);
      leaf = Node(*it->second);
    }
  });
  if (summary) {  // the whole file is read (and its tensors' checksums checked)
    summary->bytes_read += blob.size();
    summary->chunk_bytes += blob.size();
  }
  return AssembleLoadResult(header.at("common"), pieces, std::move(loaded));
}

}  // namespace

Node LoadLocalState(const std::string& blob, const Node& request, int64_t iteration, int rank,
                    LoadSummary* summary) {
  const std::string what =
      fmt::format("local checkpoint of rank {} (iteration {})", rank, iteration);
  try {
    return LoadLocalStateUnchecked(blob, request, iteration, rank, summary, what);
  } catch (const nlohmann::json::exception& e) {  // a field missing or of another type
    Fail(ErrorKind::kCorruption, "{}: damaged header: {}", what, e.what());
  }
}

}  // namespace distckpt
