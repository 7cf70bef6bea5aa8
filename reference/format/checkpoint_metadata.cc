#include "format/checkpoint_metadata.h"

#include <algorithm>
#include <iterator>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "mapping/tiling.h"

namespace distckpt {
namespace {

bool IsEmptyJson(const nlohmann::json& j) { return j.is_null() || (j.is_object() && j.empty()); }

std::string DescribeChunk(const StoredTensor& tensor, size_t index) {
  const StoredChunk& chunk = tensor.chunks[index];
  std::string text = fmt::format("chunks[{}] {}", index, chunk.box.ToString());
  if (chunk.flat) text += fmt::format(" flat [{}, {})", chunk.flat->start, chunk.flat->stop);
  return text + fmt::format(" (file {}, rank {})", chunk.file, chunk.writer_rank);
}

void CheckTensorTiling(const StoredTensor& tensor, const std::string& source) {
  const Shape& global = tensor.global_shape;
  if (tensor.chunks.size() == 1) {  // the common unsharded case
    const StoredChunk& only = tensor.chunks[0];
    if (!only.flat && only.box.shape == global &&
        std::all_of(only.box.offset.begin(), only.box.offset.end(),
                    [](int64_t o) { return o == 0; })) {
      return;
    }
  }
  // A flat chunk is the few boxes its range covers; `owner` maps each box back.
  std::vector<Box> boxes;
  std::vector<size_t> owner;
  boxes.reserve(tensor.chunks.size());
  owner.reserve(tensor.chunks.size());
  for (size_t i = 0; i < tensor.chunks.size(); ++i) {
    const StoredChunk& chunk = tensor.chunks[i];
    if (chunk.box.rank() != global.size() || chunk.box.offset.size() != global.size()) {
      Fail(ErrorKind::kCorruption, "{}: tensor '{}': {} has {} dims, the tensor has {}", source,
           tensor.key, DescribeChunk(tensor, i), chunk.box.rank(), global.size());
    }
    if (!chunk.flat) {
      boxes.push_back(chunk.box);
      owner.push_back(i);
      continue;
    }
    for (Box& box : FlatRangeBoxes(chunk.box, *chunk.flat)) {
      boxes.push_back(std::move(box));
      owner.push_back(i);
    }
  }
  const TilingCheck check = CheckTiling(global, boxes, 1);
  if (!check.outside.empty()) {
    Fail(ErrorKind::kCorruption, "{}: tensor '{}': {} lies outside the global shape {}", source,
         tensor.key, DescribeChunk(tensor, owner[check.outside[0]]), ShapeToString(global));
  }
  if (!check.overlaps.empty()) {
    const auto [a, b] = check.overlaps[0];
    Fail(ErrorKind::kCorruption, "{}: tensor '{}': stored {} and {} overlap in {}", source,
         tensor.key, DescribeChunk(tensor, std::min(owner[a], owner[b])),
         DescribeChunk(tensor, std::max(owner[a], owner[b])),
         Intersect(boxes[a], boxes[b])->ToString());
  }
  if (check.gap) {
    Fail(ErrorKind::kIncomplete,
         "{}: tensor '{}': elements {} of global shape {} are in no stored chunk ({} of {} "
         "elements stored in {} chunks)",
         source, tensor.key, check.gap->ToString(), ShapeToString(global), check.covered,
         Volume(global), tensor.chunks.size());
  }
}

}  // namespace

namespace {

// MergeFrom for a const or an expiring `other` (Other: const
// CheckpointMetadata& or CheckpointMetadata&&): its pieces copied or moved.
template <typename Other>
void Merge(CheckpointMetadata& md, Other&& other) {
  constexpr bool kMove = !std::is_const_v<std::remove_reference_t<Other>>;
  auto take = [](auto& value) -> decltype(auto) {
    if constexpr (kMove) {
      return std::move(value);
    } else {
      return value;
    }
  };
  if (md.writer.empty()) md.writer = take(other.writer);
  if (md.topology.empty()) md.topology = take(other.topology);
  if (IsEmptyJson(md.common)) md.common = take(other.common);
  if (IsEmptyJson(md.content)) md.content = take(other.content);
  auto& tensors = md.tensors;
  auto& objects = md.objects;
  for (auto& [key, theirs] : other.tensors) {
    auto [it, inserted] = tensors.try_emplace(key, take(theirs));
    if (inserted) continue;
    StoredTensor& ours = it->second;
    if (ours.dtype != theirs.dtype || ours.global_shape != theirs.global_shape) {
      Fail(ErrorKind::kShapeMismatch,
           "tensor '{}' was saved with dtype {} and global shape {} by one rank, "
           "dtype {} and global shape {} by another",
           key, DTypeName(ours.dtype), ShapeToString(ours.global_shape), DTypeName(theirs.dtype),
           ShapeToString(theirs.global_shape));
    }
    if constexpr (kMove) {
      ours.chunks.insert(ours.chunks.end(), std::make_move_iterator(theirs.chunks.begin()),
                         std::make_move_iterator(theirs.chunks.end()));
    } else {
      ours.chunks.insert(ours.chunks.end(), theirs.chunks.begin(), theirs.chunks.end());
    }
  }
  for (auto& [unique_key, theirs] : other.objects) {
    const int writer_rank = theirs.writer_rank;
    auto [it, inserted] = objects.try_emplace(unique_key, take(theirs));
    if (!inserted) {
      Fail(ErrorKind::kInvalidSharding, "object '{}' was stored twice, by rank {} and rank {}",
           unique_key, it->second.writer_rank, writer_rank);
    }
  }
}

}  // namespace

void CheckpointMetadata::MergeFrom(const CheckpointMetadata& other) { Merge(*this, other); }

void CheckpointMetadata::MergeFrom(CheckpointMetadata&& other) { Merge(*this, std::move(other)); }

CheckpointMetadata WithoutDuplicateEmptyChunks(CheckpointMetadata metadata) {
  for (auto& [key, tensor] : metadata.tensors) {
    if (std::none_of(tensor.chunks.begin(), tensor.chunks.end(),
                     [](const StoredChunk& c) { return c.numel() == 0; })) {
      continue;  // the common case: nothing to drop
    }
    std::vector<StoredChunk> kept;
    for (StoredChunk& chunk : tensor.chunks) {
      if (chunk.numel() == 0 && std::any_of(kept.begin(), kept.end(), [&](const StoredChunk& c) {
            return c.numel() == 0 && c.box.offset == chunk.box.offset && c.flat == chunk.flat;
          })) {
        continue;
      }
      kept.push_back(std::move(chunk));
    }
    tensor.chunks = std::move(kept);
  }
  return metadata;
}

void CheckChunkTiling(const CheckpointMetadata& metadata, const std::string& source) {
  for (const auto& [key, tensor] : metadata.tensors) CheckTensorTiling(tensor, source);
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
