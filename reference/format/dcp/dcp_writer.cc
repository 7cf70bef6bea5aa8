#include "format/dcp/dcp_writer.h"

#include "core/error.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"

namespace distckpt {

std::string DcpDataFileName(int rank, int index) { return RankFileName(rank, index, ".distcp"); }

bool IsDcpDataFileName(std::string_view name) { return IsRankFileName(name, ".distcp"); }

namespace {

CheckpointMetadata DcpHeader(std::string format_name) {
  CheckpointMetadata md;
  md.format = std::move(format_name);
  return md;
}

}  // namespace

DcpWriter::DcpWriter(Env* env, std::string dir, int rank, int stream, std::string format_name)
    : DataFileWriter(env, std::move(dir), rank, DcpDataFileName(rank, stream),
                     DcpHeader(std::move(format_name))) {}

void DcpWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                           std::span<const std::byte> bytes) {
  // Megatron reads a flattened piece as a tensor of shape (1, ..., 1, n); a
  // tensor of no elements is not reformulated (DcpFromMetadata).
  Shape shape = chunk.box.shape;
  if (chunk.flat && Volume(tensor.global_shape) > 0) {
    shape.assign(chunk.box.rank(), 1);
    shape.push_back(chunk.flat->size());
  }
  // Streamed to the file (no copy of the chunk): the item starts at its first record.
  std::optional<uint64_t> start;
  ZipWriter zip([&](std::span<const std::byte> b) {
    const uint64_t at = Append(b);
    if (!start) start = at;
  });
  WriteTensorRecords(zip, tensor.dtype, shape, bytes);
  zip.Finish();
  chunk.offset = *start;
}

void DcpWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  nlohmann::json value = nlohmann::json::parse(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), nullptr, false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kInvalidArgument, "object '{}': payload is not JSON", object.unique_key);
  }
  // Megatron saves torch.save([data of each local replica]) per unique key.
  const std::string item = TorchSaveJson(nlohmann::json::array({value}));
  object.length = item.size();
  object.offset = Append(std::as_bytes(std::span(item.data(), item.size())));
}

}  // namespace distckpt
