#include "format/native/native_writer.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {
namespace {

constexpr size_t kPieceBytes = 256 << 10;  // well inside a core's L2

bool ConsumeDigits(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  s.remove_prefix(n);
  return n > 0;
}

bool ConsumePrefix(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string DataFileName(int rank, int index) { return fmt::format("__{}_{}.bin", rank, index); }

bool IsDataFileName(std::string_view name) {
  return ConsumePrefix(name, "__") && ConsumeDigits(name) && ConsumePrefix(name, "_") &&
         ConsumeDigits(name) && name == ".bin";
}

NativeWriter::NativeWriter(Env* env, std::string dir, int rank, int stream)
    : env_(env), dir_(std::move(dir)), rank_(rank), stream_(stream) {
  metadata_.format = "native";
  metadata_.format_version = kNativeFormatVersion;
  metadata_.writer = "distckpt " DISTCKPT_VERSION;
}

void NativeWriter::CheckOpen() const {
  if (finished_)
    Fail(ErrorKind::kInvalidArgument, "native writer of rank {} already finished", rank_);
}

NativeWriter::DataFile& NativeWriter::FileFor(uint64_t /*length*/) {
  if (files_.empty()) {
    std::string name = DataFileName(rank_, stream_);
    files_.push_back({name, env_->NewWritableFile(JoinPath(dir_, name))});
  }
  return files_.back();
}

template <typename Stored>
void NativeWriter::Append(std::span<const std::byte> bytes, Stored& stored) {
  DataFile& data = FileFor(bytes.size());
  stored.file = data.name;
  stored.offset = data.file->size();
  stored.length = bytes.size();
  stored.writer_rank = rank_;
  // Checksum and write piece by piece, so that the write copies each piece
  // while the checksum has just brought it into the cache: one pass over
  // memory instead of two.
  Checksummer checksummer;
  for (size_t done = 0; done < bytes.size(); done += kPieceBytes) {
    std::span<const std::byte> piece = bytes.subspan(done, std::min(kPieceBytes, bytes.size() - done));
    checksummer.Update(piece);
    data.file->Append(piece);
  }
  stored.checksum = checksummer.Digest();
  bytes_written_ += bytes.size();
}

StoredChunk NativeWriter::WriteTensorChunk(const std::string& key, DType dtype,
                                           const Shape& global_shape, const Box& box,
                                           const std::optional<FlatRange>& flat,
                                           std::span<const std::byte> bytes) {
  CheckOpen();
  if (box.rank() != global_shape.size() || box.offset.size() != box.rank() ||
      !Contains(Box{Shape(global_shape.size(), 0), global_shape}, box)) {
    Fail(ErrorKind::kInvalidArgument, "chunk {} of tensor '{}' lies outside its global shape {}",
         box.ToString(), key, ShapeToString(global_shape));
  }
  if (flat && (flat->start < 0 || flat->start > flat->stop || flat->stop > box.volume())) {
    Fail(ErrorKind::kInvalidArgument,
         "flat range [{}, {}) of tensor '{}' chunk {} exceeds its {} elements", flat->start,
         flat->stop, key, box.ToString(), box.volume());
  }
  StoredChunk chunk;
  chunk.box = box;
  chunk.flat = flat;
  const uint64_t expected = static_cast<uint64_t>(chunk.numel()) * DTypeSize(dtype);
  if (bytes.size() != expected) {
    Fail(ErrorKind::kInvalidArgument,
         "tensor '{}' chunk {}: got {} bytes, but {} elements of {} take {}", key, box.ToString(),
         bytes.size(), chunk.numel(), DTypeName(dtype), expected);
  }
  auto [it, inserted] = metadata_.tensors.try_emplace(key);
  StoredTensor& tensor = it->second;
  if (inserted) {
    tensor.key = key;
    tensor.dtype = dtype;
    tensor.global_shape = global_shape;
  } else if (tensor.dtype != dtype || tensor.global_shape != global_shape) {
    Fail(ErrorKind::kShapeMismatch,
         "tensor '{}' written as dtype {} global shape {}, then as dtype {} global shape {}", key,
         DTypeName(tensor.dtype), ShapeToString(tensor.global_shape), DTypeName(dtype),
         ShapeToString(global_shape));
  }
  Append(bytes, chunk);
  tensor.chunks.push_back(chunk);
  return chunk;
}

StoredObject NativeWriter::WriteObject(const std::string& key, const std::string& unique_key,
                                       const Shape& global_shape, const Shape& global_offset,
                                       std::span<const std::byte> bytes) {
  CheckOpen();
  if (metadata_.objects.contains(unique_key)) {
    Fail(ErrorKind::kInvalidArgument, "object '{}' written twice by rank {}", unique_key, rank_);
  }
  StoredObject object;
  object.key = key;
  object.unique_key = unique_key;
  object.global_shape = global_shape;
  object.global_offset = global_offset;
  Append(bytes, object);
  metadata_.objects.emplace(unique_key, object);
  return object;
}

CheckpointMetadata NativeWriter::Finish() {
  CheckOpen();
  finished_ = true;
  for (DataFile& data : files_) {
    data.file->Sync();
    data.file->Close();
  }
  return std::move(metadata_);
}

}  // namespace distckpt
