// Maps a DCP `.metadata` (DcpMetadata) onto distckpt's format-independent
// CheckpointMetadata and back, with Megatron's torch_dist conventions
// (docs/megatron-semantics.md §3.3):
//
// - a TensorStorageMetadata is a StoredTensor; each chunk is one item whose
//   StoredChunk.file / offset are the item's _StorageInfo relative_path /
//   offset, and whose `length` is the chunk's element bytes (the item, a
//   torch.save archive, is longer; its length is kept in DcpLayout::items);
// - N-D flattened tensors: a key listed in Megatron's mcore_data is stored
//   with the reformulated shape F + (prod(local),) (F = fragments per axis)
//   and chunks (chunk index..., flat start) of size (1, ..., 1, flat
//   length); it maps to the original global shape with chunk boxes
//   (index * local shape) and flat ranges. Writing reformulates every tensor
//   that has a flat chunk and elements; its chunks must lie on a regular grid;
// - a tensor of no elements keeps its (empty) chunks, each a chunk of size
//   0 on some axis with a storage item, as torch writes one;
// - a BytesStorageMetadata whose fqn parses as a ShardedObject unique key
//   ("<key>/shard_<offset>_<shape>") is a StoredObject (its item a
//   torch.save of the list [value]); any other bytes item is common state
//   (DcpLayout::values), placed at its planner_data path.
//
// Errors: CheckpointError(kCorruption) naming `source` (a missing storage
// entry, a relative_path that is not a plain file name, an inconsistent
// mcore_data shape); a layout DCP cannot express is kUnsupported.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_DCP_DCP_LAYOUT_H_
#define DISTCKPT_FORMAT_DCP_DCP_LAYOUT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/checkpoint_metadata.h"
#include "format/dcp/dcp_metadata.h"

namespace distckpt {

using DcpItemKey = std::pair<std::string, uint64_t>;  // (file, offset in file)

struct DcpItem {
  uint64_t length = 0;
  std::vector<std::string> transforms;
};

// A bytes item that is common state rather than a ShardedObject.
struct DcpValueItem {
  std::vector<std::string> path;  // where it goes in the common state
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct DcpLayout {
  CheckpointMetadata metadata;  // tensors, objects, writer, topology; no common state
  std::map<DcpItemKey, DcpItem> items;
  std::vector<DcpValueItem> values;
  DcpTarget target = DcpTarget::kTorch2;
};

DcpLayout LayoutFromDcp(const DcpMetadata& dcp, const std::string& source);

// `item_length(file, offset)`: bytes of the item that starts there.
// `values`: common state stored as bytes items (torch's own layout for
// non-tensor values), each under the fqn of its path joined by dots.
DcpMetadata DcpFromMetadata(
    const CheckpointMetadata& metadata, DcpTarget target,
    const std::function<uint64_t(const std::string&, uint64_t)>& item_length,
    const std::vector<DcpValueItem>& values = {});

// The rank in a data file name "[hint]__<rank>_<i>.distcp"; 0 if it has none.
int DcpFileRank(std::string_view file);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_DCP_DCP_LAYOUT_H_
