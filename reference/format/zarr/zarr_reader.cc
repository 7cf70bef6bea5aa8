#include "format/zarr/zarr_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "format/dcp/megatron_files.h"
#include "format/dcp/torch_save.h"
#include "mapping/sharded_object.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// Megatron nests a key's directories at each '/'; deeper is not a checkpoint.
constexpr int kMaxDepth = 16;

enum class Kind { kMissing, kFile, kDirectory, kLink, kOther };

// What `path` is, links not followed; `size` set for a regular file.
Kind KindOf(const std::string& path, uint64_t* size = nullptr) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) return Kind::kMissing;
  if (st.type() == fs::file_type::symlink) return Kind::kLink;
  if (st.type() == fs::file_type::directory) return Kind::kDirectory;
  if (st.type() != fs::file_type::regular) return Kind::kOther;
  if (size) {
    *size = fs::file_size(path, ec);
    if (ec) FailIo("stat", path, ec.value());
  }
  return Kind::kFile;
}

[[noreturn]] void FailLink(const std::string& path) {
  Fail(ErrorKind::kCorruption,
       "{} is a symbolic link: distckpt reads only regular files and directories of the "
       "checkpoint and does not follow links",
       path);
}

bool IsShardFile(const std::string& name) {
  return name.starts_with("shard_") && name.ends_with(".pt") && name.size() > 9;
}

// A torch.save archive's value, every record's CRC32 checked (a reshard or
// export copies the value, so every record counts).
nlohmann::json LoadArchive(const ZipReader& zip) {
  for (const ZipReader::Entry& e : zip.entries()) zip.ReadRecord(e);
  return TorchLoadJson(zip);
}

// The archive `zip` holding torch.save(value) rewritten as torch.save([value]),
// the form DCP's object items have (Megatron's torch_dist stores the list of a
// rank's replicas), its pickle kept op for op: "]" + value + "a". nullptr when
// the pickle is not one distckpt can wrap so (protocol 4+ frames).
std::shared_ptr<const ObjectRecord> WrappedRecord(const ZipReader& zip, nlohmann::json value) {
  std::vector<std::pair<std::string, std::string>> records;
  for (const ZipReader::Entry& e : zip.entries()) records.emplace_back(e.name, zip.ReadRecord(e));
  bool wrapped = false;
  for (auto& [name, data] : records) {
    if (name != "data.pkl") continue;
    const bool proto = data.size() >= 3 && static_cast<uint8_t>(data[0]) == 0x80;
    if (data.empty() || data.back() != '.' || (proto && static_cast<uint8_t>(data[1]) > 3)) {
      return nullptr;
    }
    const size_t body = proto ? 2 : 0;
    data = data.substr(0, body) + "]" + data.substr(body, data.size() - body - 1) + "a.";
    wrapped = true;
  }
  if (!wrapped) return nullptr;
  std::string bytes = ZipToString([&](ZipWriter& w) {
    for (const auto& [name, data] : records) w.AddRecord(name, data);
  });
  // What a load of the new bytes gives must be the list of the value.
  const nlohmann::json check = TorchLoadJson(ZipReader(bytes, zip.source()));
  if (!check.is_array() || check.size() != 1 || check[0] != value) return nullptr;
  return std::make_shared<const ObjectRecord>(
      ObjectRecord{std::string(kTorchSaveEncoding), std::move(bytes), std::move(value)});
}

}  // namespace

ZarrReader::ZarrReader(Env* env, std::string dir) : env_(env), dir_(std::move(dir)) {
  metadata_.format = "zarr";
  metadata_.format_version = 1;
  metadata_.writer = "Megatron-Core (zarr sharded backend)";
  Walk("", 0);
  CheckChunkTiling(metadata_, JoinPath(dir_, kMegatronConfigFileName));

  const std::string common_path = JoinPath(dir_, kMegatronCommonFileName);
  const Kind kind = KindOf(common_path);
  if (kind == Kind::kLink) FailLink(common_path);
  if (kind == Kind::kMissing) {
    Fail(ErrorKind::kIncomplete,
         "{} is missing: Megatron's zarr save writes the common state there (the save did not "
         "finish, or the file was lost)",
         common_path);
  }
  std::unique_ptr<RandomAccessFile> common_file = env_->NewRandomAccessFile(common_path);
  const ZipReader common_zip(
      [&](uint64_t at, std::span<std::byte> dst) { common_file->Read(at, dst); },
      common_file->size(), common_path);
  nlohmann::json common = LoadArchive(common_zip);
  if (!common.is_object()) {
    Fail(ErrorKind::kCorruption, "{}: holds a {}, not the common state dict", common_path,
         common.type_name());
  }
  common_record_ = WrappedRecord(common_zip, common);
  if (auto it = common.find("content_metadata"); it != common.end() && it->is_object()) {
    metadata_.content = *it;
  }
  metadata_.common = std::move(common);
}

void ZarrReader::Walk(const std::string& rel, int depth) {
  const std::string path = rel.empty() ? dir_ : JoinPath(dir_, rel);
  const std::vector<std::string> names = env_->ListDir(path);
  if (!rel.empty() && std::binary_search(names.begin(), names.end(), kZarrArrayFileName)) {
    AddTensor(rel);
    return;
  }
  std::vector<std::string> shard_files;
  for (const std::string& name : names) {
    const std::string child = JoinPath(path, name);
    const std::string child_rel = rel.empty() ? name : rel + "/" + name;
    const Kind kind = KindOf(child);
    if (kind == Kind::kDirectory) {
      if (name.ends_with(".sync")) continue;  // zarr's ProcessSynchronizer locks
      if (depth + 1 >= kMaxDepth) {
        Fail(ErrorKind::kCorruption,
             "{}: nested {} directories deep; a Megatron zarr checkpoint nests a key's "
             "directories at most {} deep",
             child, depth + 1, kMaxDepth - 1);
      }
      Walk(child_rel, depth + 1);
    } else if (kind == Kind::kLink) {
      // A link inside the checkpoint's tree, or one the root would be read
      // or walked through, is refused; other files at the root are the user's.
      std::error_code ec;
      if (depth > 0 || name == kMegatronCommonFileName || fs::is_directory(child, ec)) {
        FailLink(child);
      }
    } else if (kind == Kind::kFile && !rel.empty() && IsShardFile(name)) {
      shard_files.push_back(name);
    }
  }
  if (!shard_files.empty()) AddObjects(rel, shard_files);
}

void ZarrReader::AddTensor(const std::string& key) {
  const std::string array_dir = JoinPath(dir_, key);
  const std::string zarray_path = JoinPath(array_dir, kZarrArrayFileName);
  uint64_t zarray_size = 0;
  const Kind kind = KindOf(zarray_path, &zarray_size);
  if (kind == Kind::kLink) FailLink(zarray_path);
  if (kind != Kind::kFile) {
    Fail(ErrorKind::kCorruption, "{} is not a regular file", zarray_path);
  }
  if (zarray_size > kLargestZarray) {
    Fail(ErrorKind::kCorruption, "{}: {} bytes; a .zarray has a few hundred (at most {} read)",
         zarray_path, zarray_size, kLargestZarray);
  }
  const ZarrArray array = ParseZarray(ReadFileToString(env_, zarray_path), zarray_path);
  // Every chunk is a file of the directory: a grid larger than the directory
  // is refused before it is enumerated (a hostile shape cannot make us loop).
  const std::vector<std::string> names = env_->ListDir(array_dir);
  if (array.NumChunks() > names.size()) {
    Fail(ErrorKind::kCorruption,
         "{}: shape {} in chunks of {} makes {} chunk files, but {} holds {} entries (Megatron "
         "writes every chunk; the save did not finish, or files were lost)",
         zarray_path, ShapeToString(array.shape), ShapeToString(array.chunks), array.NumChunks(),
         array_dir, names.size());
  }
  StoredTensor tensor;
  tensor.key = key;
  tensor.dtype = array.dtype;
  tensor.global_shape = array.shape;
  const Shape grid = array.GridShape();
  const uint64_t file_bytes = array.ChunkFileBytes();
  Shape index(grid.size(), 0);
  for (uint64_t n = 0; n < array.NumChunks(); ++n) {
    StoredChunk chunk;
    chunk.box = array.ChunkBox(index);
    chunk.file = key + "/" + ZarrArray::ChunkKey(index);
    chunk.length = static_cast<uint64_t>(chunk.box.volume()) * DTypeSize(array.dtype);
    const std::string path = JoinPath(dir_, chunk.file);
    uint64_t size = 0;
    switch (KindOf(path, &size)) {
      case Kind::kFile:
        break;
      case Kind::kMissing:
        Fail(ErrorKind::kCorruption,
             "chunk file {} of '{}' is missing (Megatron writes every chunk; the save did not "
             "finish, or the file was lost)",
             path, key);
      case Kind::kLink:
        FailLink(path);
      default:
        Fail(ErrorKind::kCorruption, "chunk file {} of '{}' is not a regular file", path, key);
    }
    if (size != file_bytes) {
      Fail(ErrorKind::kCorruption,
           "chunk file {} of '{}' holds {} bytes; a chunk of shape {} of {} holds {} (the file "
           "is truncated or damaged; distckpt reads uncompressed chunks only)",
           path, key, size, ShapeToString(array.chunks), ZarrDTypeName(array.dtype), file_bytes);
    }
    tensor.chunks.push_back(std::move(chunk));
    // Next grid index, last axis fastest.
    for (size_t axis = grid.size(); axis-- > 0;) {
      if (++index[axis] < grid[axis]) break;
      index[axis] = 0;
    }
  }
  arrays_.emplace(key, array);
  metadata_.tensors.emplace(key, std::move(tensor));
}

void ZarrReader::AddObjects(const std::string& key, const std::vector<std::string>& shard_files) {
  std::vector<StoredObject> objects;
  for (const std::string& name : shard_files) {
    const std::string rel = key + "/" + name;
    const std::string unique_key = rel.substr(0, rel.size() - 3);  // without ".pt"
    ShardedObject parsed;
    try {
      parsed = ShardedObject::EmptyFromUniqueKey(unique_key);
    } catch (const CheckpointError& e) {
      Fail(ErrorKind::kCorruption, "{}: not a ShardedObject file name: {}", JoinPath(dir_, rel),
           e.what());
    }
    if (parsed.global_offset.size() != parsed.global_shape.size()) {
      Fail(ErrorKind::kCorruption, "{}: offset {} and shape {} have different lengths",
           JoinPath(dir_, rel), ShapeToString(parsed.global_offset),
           ShapeToString(parsed.global_shape));
    }
    StoredObject o;
    o.key = key;
    o.unique_key = unique_key;
    o.global_offset = parsed.global_offset;
    o.global_shape = parsed.global_shape;
    o.file = rel;
    o.length = env_->FileSize(JoinPath(dir_, rel));
    objects.push_back(std::move(o));
  }
  // Old Megatron files omit the last axis of the shape (Path.with_suffix(".pt")
  // took it for a suffix): max(last offset) + 1, as Megatron's loader does.
  if (!objects.front().global_shape.empty() && objects.front().global_shape.back() < 0) {
    int64_t last = 0;
    for (const StoredObject& o : objects) last = std::max(last, o.global_offset.back());
    for (StoredObject& o : objects) {
      o.global_shape.back() = last + 1;
      // Keyed as Megatron keys it once the shape is complete.
      ShardedObject canonical;
      canonical.key = o.key;
      canonical.global_shape = o.global_shape;
      canonical.global_offset = o.global_offset;
      o.unique_key = canonical.UniqueKey();
    }
  }
  for (StoredObject& o : objects) {
    if (!metadata_.objects.emplace(o.unique_key, o).second) {
      Fail(ErrorKind::kCorruption, "{}: object {} stored twice", JoinPath(dir_, o.file),
           o.unique_key);
    }
  }
}

void ZarrReader::CheckStored(const StoredTensor& tensor, const StoredChunk& chunk) {
  auto array_it = arrays_.find(tensor.key);
  if (array_it == arrays_.end()) {
    Fail(ErrorKind::kInvalidArgument, "{}: the checkpoint holds no tensor '{}'", dir_, tensor.key);
  }
  const std::string path = JoinPath(dir_, chunk.file);
  std::unique_ptr<RandomAccessFile> file = env_->NewRandomAccessFile(path);
  if (file->size() != array_it->second.ChunkFileBytes() || chunk.length > file->size()) {
    Fail(ErrorKind::kCorruption, "chunk file {} of '{}' holds {} bytes; a chunk holds {}", path,
         tensor.key, file->size(), array_it->second.ChunkFileBytes());
  }
}

void ZarrReader::ReadChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                           std::span<const ReadRun> runs, VerifyPolicy /*policy*/) {
  auto array_it = arrays_.find(tensor.key);
  if (array_it == arrays_.end()) {
    Fail(ErrorKind::kInvalidArgument, "{}: the checkpoint holds no tensor '{}'", dir_, tensor.key);
  }
  const ZarrArray& array = array_it->second;
  const size_t es = DTypeSize(array.dtype);
  // The file is named from the chunk's place in the grid, never taken from
  // the caller: a chunk that is not one of this array's is refused.
  Shape index(array.shape.size());
  bool on_grid = chunk.box.rank() == array.shape.size() && !chunk.flat;
  for (size_t i = 0; on_grid && i < index.size(); ++i) {
    on_grid = chunk.box.offset[i] >= 0 && chunk.box.offset[i] % array.chunks[i] == 0;
    index[i] = on_grid ? chunk.box.offset[i] / array.chunks[i] : 0;
  }
  on_grid = on_grid && InsideShape(chunk.box, array.shape) && array.ChunkBox(index) == chunk.box &&
            chunk.file == tensor.key + "/" + ZarrArray::ChunkKey(index);
  if (!on_grid) {
    Fail(ErrorKind::kInvalidArgument, "{}: '{}' stores no chunk {} in file '{}'", dir_, tensor.key,
         chunk.box.ToString(), chunk.file);
  }
  const Box cell{chunk.box.offset, array.chunks};
  // The chunk's bytes in its file: one run for a whole cell; rows of the
  // clipped box at the array's edge.
  std::vector<ByteRun> stored;
  if (chunk.box.shape == array.chunks) {
    stored.push_back({0, chunk.length});
  } else {
    stored = SubBoxRuns(cell, chunk.box, es);
  }
  const std::string path = JoinPath(dir_, chunk.file);
  // Opened per read (a checkpoint has a file per chunk: thousands would
  // exhaust descriptors if kept open); no-follow, regular files only.
  std::unique_ptr<RandomAccessFile> file = env_->NewRandomAccessFile(path);
  if (file->size() != array.ChunkFileBytes()) {
    Fail(ErrorKind::kCorruption, "chunk file {} of '{}' holds {} bytes; a chunk holds {}", path,
         tensor.key, file->size(), array.ChunkFileBytes());
  }
  uint64_t bytes = 0;
  for (const ReadRun& run : runs) {
    if (run.offset_in_chunk > chunk.length || run.length > chunk.length - run.offset_in_chunk) {
      Fail(ErrorKind::kInvalidArgument, "read of bytes [{}, {}) of a chunk of {} bytes of '{}'",
           run.offset_in_chunk, run.offset_in_chunk + run.length, chunk.length, tensor.key);
    }
    // Walk the stored runs from the one holding the run's first byte.
    uint64_t logical = 0;  // logical offset where stored[i] starts
    size_t i = 0;
    while (i < stored.size() && logical + stored[i].length <= run.offset_in_chunk) {
      logical += stored[i].length;
      ++i;
    }
    uint64_t at = run.offset_in_chunk;
    uint64_t left = run.length;
    std::byte* dst = run.dst;
    while (left > 0) {
      const uint64_t within = at - logical;
      const uint64_t n = std::min(left, stored[i].length - within);
      file->Read(stored[i].offset + within, std::span(dst, n));
      dst += n;
      at += n;
      left -= n;
      logical += stored[i].length;
      ++i;
    }
    bytes += run.length;
  }
  stats_.bytes_read += bytes;
  ++stats_.chunks_unverified;  // zarr stores no checksums
}

std::string ZarrReader::ReadObject(const StoredObject& object) {
  nlohmann::json value;
  ReadObjectFile(object, value, nullptr);
  return value.dump();
}

std::shared_ptr<const ObjectRecord> ZarrReader::ReadObjectRecord(const StoredObject& object) {
  nlohmann::json value;
  std::shared_ptr<const ObjectRecord> record;
  ReadObjectFile(object, value, &record);
  return record;
}

void ZarrReader::ReadObjectFile(const StoredObject& object, nlohmann::json& value,
                                std::shared_ptr<const ObjectRecord>* record) {
  const std::string path = JoinPath(dir_, object.file);
  std::unique_ptr<RandomAccessFile> file = env_->NewRandomAccessFile(path);
  stats_.bytes_read += file->size();
  const ZipReader zip([&](uint64_t at, std::span<std::byte> dst) { file->Read(at, dst); },
                      file->size(), path);
  value = LoadArchive(zip);
  if (record) *record = WrappedRecord(zip, value);
}

}  // namespace distckpt
