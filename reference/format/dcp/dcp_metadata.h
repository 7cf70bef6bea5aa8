// DcpMetadata: the contents of a DCP checkpoint's `.metadata` pickle
// (PyTorch's torch.distributed.checkpoint Metadata written by
// FileSystemWriter; docs/dcp-format.md §2), decoded from and encoded
// to the pickle stream.
//
// Decoding accepts the torch 2.x and 1.13 class paths (and Megatron's
// MCoreMetadata), tolerates whatever `storage_meta` holds, an optional
// `version`, `transform_descriptors` on storage entries, and extra
// attributes (Megatron's all_local_plans); it keeps Megatron's `mcore_data`
// (original shapes of N-D flattened tensors) and distckpt's own `distckpt`
// attribute (writer, topology). Malformed content is CheckpointError
// (kCorruption) naming `source` and the entry; a dtype distckpt does not
// hold is kUnsupported naming the key.
//
// Encoding writes the byte-stable form of fixtures/dcp/tools/dcp_rawwrite.py:
// protocol 2, the target's class paths, MetadataIndex state {fqn, index
// [, offset]}, no storage_meta; `mcore_data` and `distckpt` are emitted only
// when non-empty (torch ignores unknown attributes).
//
// Thread-safety: value types and pure functions.
#ifndef DISTCKPT_FORMAT_DCP_DCP_METADATA_H_
#define DISTCKPT_FORMAT_DCP_DCP_METADATA_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"

namespace distckpt {

// Which PyTorch's class paths a .metadata uses (they cannot read each other's).
enum class DcpTarget { kTorch2, kTorch113 };

struct DcpChunk {
  Shape offsets;
  Shape sizes;
  friend bool operator==(const DcpChunk&, const DcpChunk&) = default;
};

// One state_dict_metadata entry: TensorStorageMetadata or BytesStorageMetadata.
struct DcpEntry {
  std::string fqn;
  bool is_bytes = false;
  DType dtype = DType::kF32;
  Shape size;
  std::vector<DcpChunk> chunks;
  friend bool operator==(const DcpEntry&, const DcpEntry&) = default;
};

// One storage_data entry: MetadataIndex -> _StorageInfo.
struct DcpStorage {
  std::string fqn;
  std::optional<Shape> offset;   // chunk offsets; absent for bytes items
  std::optional<int64_t> index;  // position hint in the entry's chunks
  std::string relative_path;
  uint64_t offset_in_file = 0;
  uint64_t length = 0;
  std::vector<std::string> transforms;  // transform_descriptors (≈2.7+, e.g. "stream.zstd/1")
  friend bool operator==(const DcpStorage&, const DcpStorage&) = default;
};

struct DcpMetadata {
  DcpTarget target = DcpTarget::kTorch2;
  std::vector<DcpEntry> entries;
  // fqn -> path in the original nested state dict (list indices as strings).
  std::optional<std::vector<std::pair<std::string, std::vector<std::string>>>> planner_data;
  std::vector<DcpStorage> storage;
  std::map<std::string, Shape> mcore_orig_shapes;    // Megatron mcore_data
  std::map<std::string, std::string> distckpt_info;  // "writer", "topology"
  std::optional<std::string> version;
  friend bool operator==(const DcpMetadata&, const DcpMetadata&) = default;
};

DcpMetadata DecodeDcpMetadata(std::string_view pickle, const std::string& source);
std::string EncodeDcpMetadata(const DcpMetadata& metadata);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_METADATA_H_
