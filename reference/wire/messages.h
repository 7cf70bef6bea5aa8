// The messages ranks send each other, one codec (wire/codec.h) for all of
// them, independent of the file formats: a change to metadata.json or to
// DCP's .metadata never changes what ranks exchange, and a DCP save no longer
// ships the native format's JSON to its coordinator.
//
//   sharded metadata  a rank's ShardedTensor / ShardedObject metadata (no
//                     data): global validation, the fully parallel
//                     distribution, plan fingerprints
//   written           what a rank wrote (CheckpointMetadata), or only its
//                     chunk checksums when it wrote the layout a cached save
//                     plan records: the commit gather
//   shard             a shard in an exchange: a header (dtype and length, or
//                     the failure of the owner's read) and its bytes
//
// Every message starts with a tag byte naming its kind. Decoding is strict:
// a wrong tag, a short message, trailing bytes, an unknown dtype or an
// element count the message cannot hold is CheckpointError(kComm) naming
// the message and the sending rank; decoded sharded metadata is checked as
// a save checks its own (ValidateMetadataIntegrity, kInvalidSharding).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_WIRE_MESSAGES_H_
#define DISTCKPT_WIRE_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "format/checkpoint_metadata.h"
#include "mapping/validation.h"

namespace distckpt {

std::string EncodeShardedMetadata(const LocalMetadata& metadata);
LocalMetadata DecodeShardedMetadata(std::string_view message, int from_rank);

// What one rank wrote: all of it, or only the checksums of its chunks in the
// order of the cached layout (ChecksumsIfSameLayout).
struct Written {
  std::optional<CheckpointMetadata> metadata;
  std::vector<uint64_t> checksums;  // when `metadata` is not set
};
std::string EncodeWritten(const CheckpointMetadata& metadata);
std::string EncodeWrittenChecksums(const std::vector<uint64_t>& checksums);
Written DecodeWritten(std::string_view message, int from_rank);

// A shard's header: its dtype and byte length, or why its owner could not
// provide it.
struct ShardHeader {
  DType dtype = DType::kF32;
  uint64_t nbytes = 0;
  std::optional<CheckpointError> failure;
};
std::string EncodeShardHeader(const ShardHeader& header);
ShardHeader DecodeShardHeader(std::string_view message, int from_rank);
// A header followed by the shard's bytes, as one message (gather rounds).
std::string EncodeShard(const Tensor& tensor);
// The header, and the bytes that follow it (a view into `message`); a byte
// count other than the header's is kComm.
ShardHeader DecodeShard(std::string_view message, int from_rank, std::span<const std::byte>* bytes);

}  // namespace distckpt

#endif  // DISTCKPT_WIRE_MESSAGES_H_
