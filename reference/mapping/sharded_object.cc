// ShardedObject: unique keys and their parser (docs/megatron-semantics.md §1.3).
#include "mapping/sharded_object.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "mapping/py_format.h"

namespace distckpt {

namespace {

std::string JoinDots(const Shape& values) { return fmt::format("{}", fmt::join(values, ".")); }

// "0.3" -> {0, 3}; "" -> {} (a 0-d grid, which Megatron cannot parse back).
bool ParseDots(std::string_view text, Shape* out) {
  out->clear();
  if (text.empty()) return true;
  size_t pos = 0;
  while (true) {
    const size_t dot = std::min(text.find('.', pos), text.size());
    int64_t value = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + dot;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || ptr != last || first == last) return false;
    out->push_back(value);
    if (dot == text.size()) return true;
    pos = dot + 1;
  }
}

}  // namespace

void ShardedObject::ValidateMetadataIntegrity() const {
  if (global_shape.size() != global_offset.size()) {
    Fail(ErrorKind::kInvalidSharding,
         "Global offset dimensions should be equal to global shape dimensions for {}", ToString());
  }
}

std::string ShardedObject::UniqueKey() const {
  return fmt::format("{}/shard_{}_{}", key, JoinDots(global_offset), JoinDots(global_shape));
}

ShardedObject ShardedObject::EmptyFromUniqueKey(const std::string& unique_key,
                                                ReplicaId replica_id) {
  // Megatron splits at the only '/' and so cannot parse keys that contain
  // one; the shard part never contains '/', so we split at the last.
  const size_t slash = unique_key.rfind('/');
  ShardedObject obj;
  bool ok = slash != std::string::npos;
  if (ok) {
    obj.key = unique_key.substr(0, slash);
    const std::string_view shard = std::string_view(unique_key).substr(slash + 1);
    const size_t first = shard.find('_');
    const size_t second = first == std::string_view::npos ? first : shard.find('_', first + 1);
    ok = second != std::string_view::npos && shard.substr(0, first) == "shard" &&
         shard.find('_', second + 1) == std::string_view::npos &&
         ParseDots(shard.substr(first + 1, second - first - 1), &obj.global_offset) &&
         ParseDots(shard.substr(second + 1), &obj.global_shape);
  }
  if (!ok) {
    Fail(ErrorKind::kInvalidArgument,
         "Invalid ShardedObject unique key {}: expected '<key>/shard_<offset>_<shape>'",
         PyRepr(unique_key));
  }
  // Backward compatibility: old checkpoints omitted the last global shape
  // dimension; the loader replaces -1 by max(last offset) + 1.
  if (obj.global_shape.size() + 1 == obj.global_offset.size()) obj.global_shape.push_back(-1);
  obj.replica_id = std::move(replica_id);
  return obj;
}

const ObjectRecord* ShardedObject::UnchangedRecord() const {
  return record && record->value == data ? record.get() : nullptr;
}

ShardedObject ShardedObject::WithoutData() const {
  ShardedObject copy = *this;
  copy.data = nullptr;
  copy.record = nullptr;
  return copy;
}

std::string ShardedObject::ToString() const {
  return fmt::format("ShardedObject(key={})", PyRepr(key));
}

}  // namespace distckpt
