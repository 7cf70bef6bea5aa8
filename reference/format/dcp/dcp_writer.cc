#include "format/dcp/dcp_writer.h"

#include "core/error.h"
#include "core/json_parse.h"
#include "format/block_checksums.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"
#include "format/hashed_writes.h"

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

DcpRecordLayout DcpLayoutOf(const StoredTensor& tensor, const StoredChunk& chunk, uint64_t bytes) {
  // Megatron reads a flattened piece as a tensor of shape (1, ..., 1, n); a
  // tensor of no elements is not reformulated (DcpFromMetadata).
  Shape shape = chunk.box.shape;
  if (chunk.flat && Volume(tensor.global_shape) > 0) {
    shape.assign(chunk.box.rank(), 1);
    shape.push_back(chunk.flat->size());
  }
  const uint32_t block = static_cast<uint32_t>(ChooseBlockSize(bytes));
  return {std::move(shape), block,
          BlockLayout::Tiles(tensor.global_shape, chunk.box, chunk.flat, BlockLayout::Flat::kRows,
                             DTypeSize(tensor.dtype), bytes, block)};
}

namespace {

// The record's CRC32 comes from CRC32s of blocks of this size (which helpers
// may compute: DcpHashRecord); the index keeps the tiles' instead.
uint32_t CrcBlock(uint64_t bytes) { return bytes > 4096 ? 4096 : 0; }

}  // namespace

void DcpWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                           std::span<const std::byte> bytes) {
  StoreRecord(tensor, chunk, bytes, nullptr);
}

void DcpWriter::StoreChunks(std::span<PendingChunk> chunks) {
  StoreInRuns(chunks, [&](std::span<PendingChunk> run) {
    std::vector<Hashed> hashed(run.size());
    AppendWhileHelpersHash(
        run.size(), run.size(), helpers(),
        [&](size_t i) {  // on this thread or a helper
          const DcpRecordLayout layout =
              DcpLayoutOf(*run[i].tensor, run[i].chunk, run[i].bytes.size());
          hashed[i].sums = DcpHashRecord(
              run[i].bytes, CrcBlock(run[i].bytes.size()),
              ChunkBindingSeed(run[i].tensor->key, run[i].tensor->dtype, run[i].chunk),
              &hashed[i].blocks);
          hashed[i].blocks = DcpTileCrcs(layout.tiles, run[i].bytes);
        },
        [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i)
            StoreRecord(*run[i].tensor, run[i].chunk, run[i].bytes, &hashed[i]);
          FlushHeld();  // what is hashed is written now, not after the next hashes
        });
  });
}

void DcpWriter::StoreRecord(const StoredTensor& tensor, StoredChunk& chunk,
                            std::span<const std::byte> bytes, Hashed* hashed) {
  // Streamed to the file (no copy of the chunk), hashed piece by piece while
  // cached: the record's CRC32 (patched into its local header) and its
  // blocks' (the item index) in the one pass that writes it, unless hashed
  // ahead; then the chunk's bytes are held (the caller flushes them) and
  // written with the records around them in one gathered write.
  const DcpRecordLayout layout = DcpLayoutOf(tensor, chunk, bytes.size());
  const Shape& shape = layout.shape;
  const uint32_t block_size = layout.block_size;
  std::vector<uint32_t> blocks;
  DcpRecordSums sums;
  const uint64_t binding = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
  std::optional<uint64_t> start;
  ZipWriter zip(
      [&](std::span<const std::byte> b) {
        const uint64_t at = hashed && b.data() == bytes.data() ? AppendHeld(b) : Append(b);
        if (!start) start = at;
      },
      "archive", false,
      [&](uint64_t at, std::span<const std::byte> b) { Overwrite(*start + at, b); });
  const uint64_t data_offset = WriteTensorRecords(
      zip, Pickle(tensor.dtype, shape, bytes.size()), bytes, [&](const ZipWriter::Sink& sink) {
        if (hashed) {
          sink(bytes);
          blocks = std::move(hashed->blocks);
          sums = hashed->sums;
        } else {
          sums = DcpHashRecord(bytes, CrcBlock(bytes.size()), binding, &blocks, sink, helpers());
          blocks = DcpTileCrcs(layout.tiles, bytes);
        }
        return sums.crc;
      });
  zip.Finish();
  chunk.offset = *start;
  if (bytes.empty()) return;  // nothing to read; Commit may drop duplicate empty chunks
  index_.Add({.item_offset = *start,
              .data_offset = *start + data_offset,
              .data_size = bytes.size(),
              .binding = binding,
              .crcs_offset = 0,
              .hash = sums.hash,
              .crc = sums.crc,
              .block_size = block_size,
              .tiles = layout.tiles.tiles()},
             std::move(blocks));
}

std::string_view DcpWriter::Pickle(DType dtype, const Shape& shape, uint64_t bytes) {
  auto key = std::make_pair(dtype, shape);
  if (auto it = pickles_.find(key); it != pickles_.end()) return it->second;
  if (pickles_.size() < kMaxPickles) {
    return pickles_.emplace(std::move(key), TensorPickle(dtype, shape, bytes)).first->second;
  }
  pickle_ = TensorPickle(dtype, shape, bytes);
  return pickle_;
}

void DcpWriter::FinishItems(uint64_t size) {
  if (index_.empty()) return;
  const std::string index = index_.Finish(size);
  Append(std::as_bytes(std::span(index.data(), index.size())));
}

void DcpWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  const std::string_view payload(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (payload.starts_with("PK\x03\x04")) {
    // A stored item (kTorchSaveEncoding), which JSON text never starts like: kept as it is.
    ZipReader(payload, fmt::format("object '{}': record", object.unique_key)).Get("data.pkl");
    object.length = bytes.size();
    object.offset = Append(bytes);
    return;
  }
  CheckJsonDepth(payload, fmt::format("object '{}': payload", object.unique_key));
  nlohmann::json value = nlohmann::json::parse(payload, nullptr, false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kInvalidArgument, "object '{}': payload is not JSON", object.unique_key);
  }
  // Megatron saves torch.save([data of each local replica]) per unique key.
  const std::string item = TorchSaveJson(nlohmann::json::array({value}));
  object.length = item.size();
  object.offset = Append(std::as_bytes(std::span(item.data(), item.size())));
}

}  // namespace distckpt
