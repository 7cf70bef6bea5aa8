// What a committed checkpoint holds, independent of its on-disk format:
// global tensors as lists of stored chunks, sharded objects, common state.
// The native format (format/native/) stores this as metadata.json; the DCP
// format maps .metadata onto it.
//
// Thread-safety: value types.
#ifndef DISTCKPT_FORMAT_CHECKPOINT_METADATA_H_
#define DISTCKPT_FORMAT_CHECKPOINT_METADATA_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"

namespace distckpt {

// One stored piece of a global tensor: the elements of `box` (global
// coordinates; prepended axes have size 1) in row-major order, or only the
// elements [flat.start, flat.stop) of that order when `flat` is set.
struct StoredChunk {
  Box box;
  std::optional<FlatRange> flat;
  std::string file;                  // relative to the checkpoint directory
  uint64_t offset = 0;               // byte offset of the first element in `file`
  uint64_t length = 0;               // bytes
  std::optional<uint64_t> checksum;  // xxHash3-64 of the `length` bytes (native v1, DCP)
  int writer_rank = 0;
  // Native format versions 2 and 3: one bound checksum per `block_size`
  // bytes (format/block_checksums.h); block_size 0 when the format
  // has none. Version 2 keeps them here, in metadata.json; version 3 stores
  // them in the data file right after the payload (8 bytes each) and keeps
  // only their own checksum here, in `sums_checksum`.
  uint64_t block_size = 0;
  std::vector<uint64_t> block_checksums;
  std::optional<uint64_t> sums_checksum;
  // Native format version 4: the payload's blocks are tiles laid along the
  // reshard cuts (format/block_layout.h), this many; 0: uniform blocks of
  // `block_size` (versions 2 and 3), or an empty chunk.
  uint64_t tiles = 0;
  // Native format version 5: a flat chunk's tiles are its box's rows
  // (BlockLayout::Flat::kRows); false: uniform blocks (version 4).
  bool flat_rows = false;

  int64_t numel() const { return flat ? flat->size() : box.volume(); }
  friend bool operator==(const StoredChunk&, const StoredChunk&) = default;
};

struct StoredTensor {
  std::string key;
  DType dtype = DType::kF32;
  Shape global_shape;
  std::vector<StoredChunk> chunks;
  friend bool operator==(const StoredTensor&, const StoredTensor&) = default;
};

struct StoredObject {
  std::string key;         // ShardedObject key
  std::string unique_key;  // "{key}/shard_{offset}_{shape}"
  Shape global_shape;
  Shape global_offset;
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::optional<uint64_t> checksum;
  int writer_rank = 0;
  friend bool operator==(const StoredObject&, const StoredObject&) = default;
};

struct CheckpointMetadata {
  std::string format = "native";  // "native" or "dcp"
  int format_version = 1;
  std::string writer;                                 // "distckpt 0.1.0"
  std::string topology;                               // topology string at save, "" if unknown
  std::map<std::string, StoredTensor> tensors;        // by key
  std::map<std::string, StoredObject> objects;        // by unique key
  nlohmann::json common = nlohmann::json::object();   // non-sharded state
  nlohmann::json content = nlohmann::json::object();  // free-form (content_metadata)

  // Adds another rank's pieces (tensors merged by key; dtype and global shape
  // must agree, else CheckpointError(kShapeMismatch) naming the key; an
  // object unique key stored twice is CheckpointError(kInvalidSharding)).
  // Every chunk is kept, also the equal empty chunks that ranks holding the
  // same shard of a tensor of no elements each write (the formats store one:
  // WithoutDuplicateEmptyChunks; a format deriving item extents from where
  // the next item starts needs them all). Empty writer/topology/common/
  // content are taken from `other`.
  void MergeFrom(const CheckpointMetadata& other);
  // The same, moving `other`'s tensors, chunks and objects instead of copying them.
  void MergeFrom(CheckpointMetadata&& other);
  // The set of keys (tensor keys and object base keys), for strict handling.
  std::vector<std::string> Keys() const;
  friend bool operator==(const CheckpointMetadata&, const CheckpointMetadata&) = default;
};

// `metadata` with one empty chunk (the first) per offset and flat range of
// each tensor, as checkpoints store them (DCP keys chunks by offset, and
// torch's dedup_save_plans keeps one too).
CheckpointMetadata WithoutDuplicateEmptyChunks(CheckpointMetadata metadata);

// Checks that every stored tensor's chunks tile its global shape exactly:
// each chunk inside it, no element stored twice (a chunk with `flat` stores
// only that range of its box), none missing. Readers call it on open, so a
// damaged chunk offset is refused before any byte is planned. Throws
// CheckpointError naming `source` (the metadata file), the key, the chunks
// (their index in the key's chunk list, file and writer rank) and the region:
// kCorruption for a chunk outside the shape or two chunks sharing elements,
// kIncomplete for elements no chunk stores. About O(n log n) for n chunks
// (mapping/tiling.h); one whole chunk is a constant-time check.
void CheckChunkTiling(const CheckpointMetadata& metadata, const std::string& source);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_CHECKPOINT_METADATA_H_
