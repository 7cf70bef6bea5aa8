// ShardedObject (docs/megatron-semantics.md §1.3): an opaque value (JSON here) that is
// one element of a grid of objects; cannot be resharded. LocalNonpersistentObject
// (§1.5): a value never saved, handed back to the caller on load.
//
// ObjectRecord: an object as a checkpoint stored it (a DCP item: a pickle, which
// keeps Python tuples, numpy arrays, globals and dict order that the JSON value
// loses). A ShardedObject carrying one is saved as those bytes, unchanged, while
// its `data` still equals the record's value and the format stores that encoding
// (Format::ObjectRecordEncoding); otherwise from `data`, as any object.
//
// Thread-safety: value types.
#ifndef DISTCKPT_MAPPING_SHARDED_OBJECT_H_
#define DISTCKPT_MAPPING_SHARDED_OBJECT_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/box.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

struct ObjectRecord {
  std::string encoding;  // what `bytes` are: "torch.save" (a DCP item)
  std::string bytes;
  nlohmann::json value;  // what a load of `bytes` gives
};

struct ShardedObject {
  std::string key;
  nlohmann::json data;
  Shape global_shape;
  Shape global_offset;
  ReplicaId replica_id{0};
  std::shared_ptr<const ObjectRecord> record = nullptr;  // as stored, if known

  // `record` while it holds `data` (its value equals `data`), else nullptr.
  const ObjectRecord* UnchangedRecord() const;

  // Rule: len(global_shape) == len(global_offset) (Megatron's message).
  void ValidateMetadataIntegrity() const;
  // "{key}/shard_{'.'.join(offset)}_{'.'.join(shape)}", e.g. "ObjB/shard_0.3_1.8".
  std::string UniqueKey() const;
  // Parses a unique key (splitting at the LAST '/', so keys may contain '/':
  // Megatron splits at the only one and breaks on such keys, §12). A shape one
  // shorter than the offset gets a trailing -1 (backward compatibility).
  static ShardedObject EmptyFromUniqueKey(const std::string& unique_key,
                                          ReplicaId replica_id = {0});
  ShardedObject WithoutData() const;
  std::string ToString() const;  // ShardedObject(key='...')
};

struct LocalNonpersistentObject {
  nlohmann::json obj;
};

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_SHARDED_OBJECT_H_
