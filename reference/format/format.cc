#include "format/format.h"

#include <algorithm>

#include "core/error.h"

namespace distckpt {

void CheckpointReader::StreamChunk(const StoredTensor& tensor, const StoredChunk& chunk,
                                   std::span<const ReadRun> ranges, VerifyPolicy policy,
                                   uint64_t /*piece_bytes*/, const ConsumeBytes& consume) {
  CheckStored(tensor, chunk);  // before a buffer sized from the metadata
  uint64_t total = 0;
  for (const ReadRun& range : ranges) total += range.length;
  std::vector<std::byte> staging(total);
  std::vector<ReadRun> runs(ranges.begin(), ranges.end());
  std::byte* cursor = staging.data();
  for (ReadRun& run : runs) {
    run.dst = cursor;
    cursor += run.length;
  }
  ReadChunk(tensor, chunk, runs, policy);
  for (const ReadRun& run : runs) consume(run.offset_in_chunk, std::span(run.dst, run.length));
}

void CheckTensorStored(CheckpointReader& reader, const StoredTensor& tensor) {
  unsigned __int128 held = 0;
  for (const StoredChunk& chunk : tensor.chunks) {
    reader.CheckStored(tensor, chunk);
    held += chunk.length;
  }
  unsigned __int128 needed = DTypeSize(tensor.dtype);
  for (int64_t dim : tensor.global_shape) {
    if (dim <= 0) needed = 0;  // a tensor of no elements needs no bytes (checked before the break)
  }
  for (int64_t dim : tensor.global_shape) {
    if (needed == 0) break;
    needed *= static_cast<uint64_t>(std::max<int64_t>(dim, 0));
    if (needed > held) break;  // (and before the product can overflow)
  }
  if (needed > held) {
    Fail(ErrorKind::kCorruption,
         "tensor '{}': global shape {} of {} takes more bytes than its {} stored chunks hold "
         "({})",
         tensor.key, ShapeToString(tensor.global_shape), DTypeName(tensor.dtype),
         tensor.chunks.size(), static_cast<uint64_t>(held));
  }
}

void CheckpointReader::ReadChunks(std::span<const ChunkRead> reads, VerifyPolicy policy) {
  for (const ChunkRead& read : reads) ReadChunk(*read.tensor, *read.chunk, read.runs, policy);
}

std::string_view VerifyPolicyName(VerifyPolicy policy) {
  switch (policy) {
    case VerifyPolicy::kAlways:
      return "always";
    case VerifyPolicy::kNever:
      return "never";
    default:
      return "whole";
  }
}

VerifyPolicy ParseVerifyPolicy(std::string_view name) {
  for (VerifyPolicy p : {VerifyPolicy::kWhenWhole, VerifyPolicy::kAlways, VerifyPolicy::kNever}) {
    if (name == VerifyPolicyName(p)) return p;
  }
  Fail(ErrorKind::kInvalidArgument, "unknown verify policy '{}' (expected whole, always or never)",
       name);
}

}  // namespace distckpt
