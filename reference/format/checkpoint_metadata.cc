#include "format/checkpoint_metadata.h"

#include <algorithm>

#include "core/error.h"

namespace distckpt {
namespace {

bool IsEmptyJson(const nlohmann::json& j) { return j.is_null() || (j.is_object() && j.empty()); }

}  // namespace

void CheckpointMetadata::MergeFrom(const CheckpointMetadata& other) {
  if (writer.empty()) writer = other.writer;
  if (topology.empty()) topology = other.topology;
  if (IsEmptyJson(common)) common = other.common;
  if (IsEmptyJson(content)) content = other.content;
  for (const auto& [key, theirs] : other.tensors) {
    auto [it, inserted] = tensors.try_emplace(key, theirs);
    if (inserted) continue;
    StoredTensor& ours = it->second;
    if (ours.dtype != theirs.dtype || ours.global_shape != theirs.global_shape) {
      Fail(ErrorKind::kShapeMismatch,
           "tensor '{}' was saved with dtype {} and global shape {} by one rank, "
           "dtype {} and global shape {} by another",
           key, DTypeName(ours.dtype), ShapeToString(ours.global_shape), DTypeName(theirs.dtype),
           ShapeToString(theirs.global_shape));
    }
    ours.chunks.insert(ours.chunks.end(), theirs.chunks.begin(), theirs.chunks.end());
  }
  for (const auto& [unique_key, theirs] : other.objects) {
    auto [it, inserted] = objects.try_emplace(unique_key, theirs);
    if (!inserted) {
      Fail(ErrorKind::kInvalidSharding, "object '{}' was stored twice, by rank {} and rank {}",
           unique_key, it->second.writer_rank, theirs.writer_rank);
    }
  }
}

std::vector<std::string> CheckpointMetadata::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(tensors.size() + objects.size());
  for (const auto& [key, tensor] : tensors) keys.push_back(key);
  for (const auto& [unique_key, object] : objects) keys.push_back(object.key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace distckpt
