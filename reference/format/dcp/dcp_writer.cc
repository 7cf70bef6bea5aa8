#include "format/dcp/dcp_writer.h"

#include <charconv>

#include "core/error.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"

namespace distckpt {
namespace {

bool ConsumeNumber(std::string_view& s) {
  int value;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data() || s.front() == '+' || s.front() == '-') return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

}  // namespace

std::string DcpDataFileName(int rank, int index) { return fmt::format("__{}_{}.distcp", rank, index); }

bool IsDcpDataFileName(std::string_view name) {
  if (!name.starts_with("__")) return false;
  name.remove_prefix(2);
  if (!ConsumeNumber(name) || !name.starts_with("_")) return false;
  name.remove_prefix(1);
  return ConsumeNumber(name) && name == ".distcp";
}

DcpWriter::DcpWriter(Env* env, std::string dir, int rank, int stream, std::string format_name)
    : env_(env), dir_(std::move(dir)), rank_(rank), file_name_(DcpDataFileName(rank, stream)) {
  metadata_.format = std::move(format_name);
  metadata_.writer = "distckpt " DISTCKPT_VERSION;
}

void DcpWriter::CheckOpen() const {
  if (finished_) Fail(ErrorKind::kInvalidArgument, "DCP writer of rank {} already finished", rank_);
}

uint64_t DcpWriter::AppendItem(const std::function<void(ZipWriter&)>& write) {
  if (!file_) file_ = env_->NewWritableFile(JoinPath(dir_, file_name_));
  const uint64_t start = file_->size();
  ZipWriter zip([&](std::span<const std::byte> b) { file_->Append(b); });
  write(zip);
  zip.Finish();
  bytes_written_ += zip.size();
  return start;
}

StoredChunk DcpWriter::WriteTensorChunk(const std::string& key, DType dtype,
                                        const Shape& global_shape, const Box& box,
                                        const std::optional<FlatRange>& flat,
                                        std::span<const std::byte> bytes) {
  CheckOpen();
  const bool inside = box.rank() == global_shape.size() && box.offset.size() == box.rank() &&
                      Contains(Box{Shape(global_shape.size(), 0), global_shape}, box);
  if (!inside || (flat && (flat->start < 0 || flat->start > flat->stop || flat->stop > box.volume()))) {
    Fail(ErrorKind::kInvalidArgument, "tensor '{}': chunk {}{} does not fit its global shape {}",
         key, box.ToString(),
         flat ? fmt::format(" flat [{}, {})", flat->start, flat->stop) : std::string(),
         ShapeToString(global_shape));
  }
  StoredChunk chunk;
  chunk.box = box;
  chunk.flat = flat;
  chunk.length = static_cast<uint64_t>(chunk.numel()) * DTypeSize(dtype);
  if (bytes.size() != chunk.length) {
    Fail(ErrorKind::kInvalidArgument, "tensor '{}' chunk {}: {} bytes for {} elements of {}", key,
         box.ToString(), bytes.size(), chunk.numel(), DTypeName(dtype));
  }
  auto [it, inserted] = metadata_.tensors.try_emplace(key, StoredTensor{key, dtype, global_shape, {}});
  if (!inserted && (it->second.dtype != dtype || it->second.global_shape != global_shape)) {
    Fail(ErrorKind::kShapeMismatch, "tensor '{}' written as {} {}, then as {} {}", key,
         DTypeName(it->second.dtype), ShapeToString(it->second.global_shape), DTypeName(dtype),
         ShapeToString(global_shape));
  }
  // Megatron reads a flattened piece as a tensor of shape (1, ..., 1, n); a
  // tensor of no elements is not reformulated (DcpFromMetadata).
  Shape shape = box.shape;
  if (flat && Volume(global_shape) > 0) {
    shape.assign(box.rank(), 1);
    shape.push_back(flat->size());
  }
  chunk.offset = AppendItem([&](ZipWriter& zip) { WriteTensorRecords(zip, dtype, shape, bytes); });
  chunk.file = file_name_;
  chunk.writer_rank = rank_;
  it->second.chunks.push_back(chunk);
  return chunk;
}

StoredObject DcpWriter::WriteObject(const std::string& key, const std::string& unique_key,
                                    const Shape& global_shape, const Shape& global_offset,
                                    std::span<const std::byte> bytes) {
  CheckOpen();
  if (metadata_.objects.contains(unique_key)) {
    Fail(ErrorKind::kInvalidArgument, "object '{}' written twice by rank {}", unique_key, rank_);
  }
  nlohmann::json value = nlohmann::json::parse(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), nullptr, false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kInvalidArgument, "object '{}': payload is not JSON", unique_key);
  }
  // Megatron saves torch.save([data of each local replica]) per unique key.
  const std::string item = TorchSaveJson(nlohmann::json::array({value}));
  if (!file_) file_ = env_->NewWritableFile(JoinPath(dir_, file_name_));
  StoredObject object{key, unique_key, global_shape, global_offset, file_name_, file_->size(),
                      item.size(), std::nullopt, rank_};
  file_->Append(std::as_bytes(std::span(item.data(), item.size())));
  bytes_written_ += item.size();
  metadata_.objects.emplace(unique_key, object);
  return object;
}

CheckpointMetadata DcpWriter::Finish() {
  CheckOpen();
  finished_ = true;
  if (file_) {
    file_->Sync();
    file_->Close();
  }
  return std::move(metadata_);
}

}  // namespace distckpt
