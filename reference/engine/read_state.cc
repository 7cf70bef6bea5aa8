#include "engine/read_state.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "core/error.h"
#include "engine/load_plan.h"
#include "engine/tensor_reader.h"
#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

[[noreturn]] void FailUnknownKey(const CheckpointMetadata& md, const std::string& key) {
  std::vector<std::string> keys = md.Keys();
  std::sort(keys.begin(), keys.end());
  Fail(ErrorKind::kKeyMismatch, "{} from model not in state dict: [{}]", key,
       fmt::join(keys, ", "));
}

Tensor LoadTensor(CheckpointReader& reader, const ShardedTensor& request, VerifyPolicy policy,
                  LoadSummary* summary) {
  const CheckpointMetadata& md = reader.metadata();
  auto it = md.tensors.find(request.key);
  if (it == md.tensors.end()) FailUnknownKey(md, request.key);
  const StoredTensor& stored = it->second;

  Tensor dst = request.data;
  Shape local = request.flattened_range ? Shape{request.flattened_range->size()}
                                        : request.local_shape;
  if (!dst.defined()) {
    dst = request.allow_shape_mismatch ? Tensor::Zeros(request.dtype, local)
                                       : Tensor::Empty(request.dtype, local);
  } else if (request.allow_shape_mismatch) {
    std::fill(dst.data(), dst.data() + dst.nbytes(), std::byte{0});
  }
  TensorPlan plan = PlanTensorLoad(stored, request);
  PlanBytes bytes = ExecuteTensorPlan(reader, stored, plan, dst, policy);
  if (summary) {
    summary->bytes_needed += bytes.needed;
    summary->chunk_bytes += bytes.chunk_bytes;
    summary->bytes_loaded += static_cast<uint64_t>(plan.elements_covered) * DTypeSize(dst.dtype());
  }
  return dst;
}

nlohmann::json LoadObject(CheckpointReader& reader, const ShardedObject& request,
                          LoadSummary* summary) {
  const CheckpointMetadata& md = reader.metadata();
  std::string unique_key = request.UniqueKey();
  auto it = md.objects.find(unique_key);
  if (it == md.objects.end()) FailUnknownKey(md, unique_key);
  std::string payload = reader.ReadObject(it->second);
  if (summary) summary->bytes_needed += it->second.length;
  nlohmann::json value = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kCorruption, "object '{}' in {} is not valid JSON", unique_key,
         it->second.file);
  }
  return value;
}

}  // namespace

Node ReadShardedState(CheckpointReader& reader, const Node& sharded, VerifyPolicy policy,
                      LoadSummary* summary) {
  Node loaded = sharded;
  ForEachLeaf(loaded, [&](const NodePath&, Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      leaf = Node(LoadTensor(reader, *t, policy, summary));
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      leaf = Node(LoadObject(reader, *o, summary));
    }
  });
  if (summary) {
    const ReadStats& stats = reader.stats();
    summary->bytes_read = stats.bytes_read;
    summary->chunks_verified = stats.chunks_verified;
    summary->chunks_unverified = stats.chunks_unverified;
  }
  return loaded;
}

}  // namespace distckpt
