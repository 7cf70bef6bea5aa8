#include "engine/read_state.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/helper_pool.h"
#include "engine/chunk_index.h"
#include "engine/common_state.h"
#include "engine/load_plan.h"
#include "engine/tensor_reader.h"
#include "mapping/dict_utils.h"
#include "strategy/device_staging.h"

namespace distckpt {
namespace {

[[noreturn]] void FailUnknownKey(const CheckpointMetadata& md, const std::string& key) {
  std::vector<std::string> keys = md.Keys();
  std::sort(keys.begin(), keys.end());
  Fail(ErrorKind::kKeyMismatch, "{} from model not in state dict: [{}]", key,
       fmt::join(keys, ", "));
}

const StoredTensor& StoredFor(const CheckpointMetadata& md, const ShardedTensor& request) {
  auto it = md.tensors.find(request.key);
  if (it == md.tensors.end()) FailUnknownKey(md, request.key);
  return it->second;
}

const StoredObject& StoredFor(const CheckpointMetadata& md, const ShardedObject& request) {
  std::string unique_key = request.UniqueKey();
  auto it = md.objects.find(unique_key);
  if (it == md.objects.end()) FailUnknownKey(md, unique_key);
  return it->second;
}

// Chunk indexes of the stored tensors that serve more than one requested
// piece and hold at least kIndexMinChunks chunks (fewer are scanned as fast):
// built once per key per read or plan, then shared read-only by its workers.
constexpr size_t kIndexMinChunks = 64;
using ChunkIndexes = std::unordered_map<const StoredTensor*, ChunkIndex>;

ChunkIndexes IndexChunks(const CheckpointMetadata& md,
                         const std::vector<const ShardedTensor*>& requests) {
  std::unordered_map<const StoredTensor*, size_t> pieces;
  for (const ShardedTensor* t : requests) {
    auto it = md.tensors.find(t->key);  // unknown keys fail where they are planned
    if (it != md.tensors.end() && it->second.chunks.size() >= kIndexMinChunks) {
      ++pieces[&it->second];
    }
  }
  ChunkIndexes indexes;
  for (const auto& [stored, count] : pieces) {
    if (count > 1) indexes.emplace(stored, ChunkIndex(*stored));
  }
  return indexes;
}

TensorPlan PlanWith(const ChunkIndexes& indexes, const StoredTensor& stored,
                    const ShardedTensor& request) {
  auto it = indexes.find(&stored);
  return PlanTensorLoad(stored, request, it == indexes.end() ? nullptr : &it->second);
}

Tensor LoadTensor(CheckpointReader& reader, const ShardedTensor& request, VerifyPolicy policy,
                  const ChunkIndexes& indexes, LoadSummary* summary) {
  const StoredTensor& stored = StoredFor(reader.metadata(), request);

  Tensor dst = request.data;
  Shape local = request.DataShape();
  if (!dst.defined()) dst = Tensor::Empty(request.dtype, local);
  // A device destination is read into a page-locked host buffer, then
  // copied over; when the stored dtype widens into the requested one, the
  // narrower stored bytes cross and the device converts them.
  std::shared_ptr<StagingBuffer> staged;
  Tensor host = dst;
  const bool widen_on_device = dst.on_cuda() && DeviceConvertible(stored.dtype, dst.dtype());
  if (dst.on_cuda()) {
    const DType host_dtype = widen_on_device ? stored.dtype : dst.dtype();
    staged = SharedStagingPool().Acquire(static_cast<size_t>(dst.numel()) * DTypeSize(host_dtype));
    host = Tensor::Wrap(staged->data(), host_dtype, local);
  }
  if (request.allow_shape_mismatch)
    std::fill(host.data(), host.data() + host.nbytes(), std::byte{0});
  TensorPlan plan = PlanWith(indexes, stored, request);
  PlanBytes bytes = ExecuteTensorPlan(reader, stored, plan, host, policy);
  if (widen_on_device) {
    Tensor narrow = host.To(dst.device());
    ConvertOnDevice(narrow.raw_data(), stored.dtype, dst.raw_data(), dst.dtype(),
                    static_cast<size_t>(dst.numel()), dst.device());
  } else if (dst.on_cuda()) {
    dst.CopyFrom(host);
  }
  if (summary) {
    summary->bytes_needed += bytes.needed;
    summary->chunk_bytes += bytes.chunk_bytes;
    summary->bytes_loaded += static_cast<uint64_t>(plan.elements_covered) * DTypeSize(dst.dtype());
  }
  return dst;
}

nlohmann::json LoadObject(CheckpointReader& reader, const ShardedObject& request,
                          LoadSummary* summary) {
  const StoredObject& stored = StoredFor(reader.metadata(), request);
  std::string payload = reader.ReadObject(stored);
  if (summary) summary->bytes_needed += stored.length;
  nlohmann::json value = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kCorruption, "object '{}' in {} is not valid JSON", stored.unique_key,
         stored.file);
  }
  return value;
}

// `x`'s dicts and lists with every ShardedTensor or ShardedObject leaf an
// undefined Tensor (a slot for what is loaded), other leaves copied: the
// result's shape without a copy of the shards' metadata.
Node Skeleton(const Node& x) {
  if (const Dict* d = x.get_if<Dict>()) {
    Dict out;
    for (const auto& [key, value] : *d) out.emplace_hint(out.end(), key, Skeleton(value));
    return Node(std::move(out));
  }
  if (const List* l = x.get_if<List>()) {
    List out;
    out.reserve(l->size());
    for (const Node& value : *l) out.push_back(Skeleton(value));
    return Node(std::move(out));
  }
  if (x.is<ShardedTensor>() || x.is<ShardedObject>()) return Node(Tensor());
  return x;
}

}  // namespace

Node ReadShardedState(CheckpointReader& reader, const Node& sharded, VerifyPolicy policy,
                      LoadSummary* summary, int threads) {
  // Each shard leaf of `sharded` and its slot in `loaded`: the i-th leaf of
  // one walk and of the other (Skeleton keeps every dict and list).
  Node loaded = Skeleton(sharded);
  std::vector<Node*> all_slots;
  ForEachLeaf(loaded, [&](const NodePath&, Node& slot) { all_slots.push_back(&slot); });
  std::vector<const Node*> leaves;
  std::vector<Node*> slots;
  std::vector<const ShardedTensor*> requests;
  size_t at = 0;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    Node* slot = all_slots.at(at++);
    if (leaf.is<ShardedTensor>() || leaf.is<ShardedObject>()) {
      leaves.push_back(&leaf);
      slots.push_back(slot);
    }
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) requests.push_back(t);
  });
  const ChunkIndexes indexes = IndexChunks(reader.metadata(), requests);
  // Leaves are read by a few workers (the reader serves concurrent reads);
  // each keeps its own byte counts and the first error wins.
  if (threads <= 0) threads = HardwareThreads();
  threads = static_cast<int>(std::min<size_t>(threads, leaves.size()));
  std::vector<LoadSummary> partial(std::max(threads, 1));
  std::vector<std::exception_ptr> errors(partial.size());
  std::atomic<size_t> next{0};
  auto work = [&](size_t worker) {
    try {
      for (size_t i = next++; i < leaves.size(); i = next++) {
        const Node& leaf = *leaves[i];
        if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
          *slots[i] = Node(LoadTensor(reader, *t, policy, indexes, &partial[worker]));
        } else {
          *slots[i] = Node(LoadObject(reader, leaf.as<ShardedObject>(), &partial[worker]));
        }
      }
    } catch (...) {
      errors[worker] = std::current_exception();
      next = leaves.size();  // stop the others early
    }
  };
  // The calling thread and idle threads of the process's helper pool: a load
  // starts no thread.
  RunWithHelpers(threads - 1, work);
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  if (summary) {
    for (const LoadSummary& p : partial) {
      summary->bytes_needed += p.bytes_needed;
      summary->chunk_bytes += p.chunk_bytes;
      summary->bytes_loaded += p.bytes_loaded;
    }
    const ReadStats& stats = reader.stats();
    summary->bytes_read = stats.bytes_read;
    summary->chunks_verified = stats.chunks_verified;
    summary->chunks_unverified = stats.chunks_unverified;
  }
  return loaded;
}

void PlanShardedState(const CheckpointReader& reader, const Node& sharded, LoadSummary* summary) {
  const CheckpointMetadata& md = reader.metadata();
  std::vector<const Node*> leaves;
  std::vector<const ShardedTensor*> requests;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    leaves.push_back(&leaf);
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) requests.push_back(t);
  });
  const ChunkIndexes indexes = IndexChunks(md, requests);
  for (const Node* leaf : leaves) {
    if (const ShardedTensor* t = leaf->get_if<ShardedTensor>()) {
      const StoredTensor& stored = StoredFor(md, *t);
      TensorPlan plan = PlanWith(indexes, stored, *t);
      if (summary) {
        for (const ChunkPlan& c : plan.chunks) {
          summary->bytes_needed += static_cast<uint64_t>(c.elements) * DTypeSize(stored.dtype);
          summary->chunk_bytes += stored.chunks[c.chunk_index].length;
        }
      }
    } else if (const ShardedObject* o = leaf->get_if<ShardedObject>()) {
      const StoredObject& stored = StoredFor(md, *o);
      if (summary) summary->bytes_needed += stored.length;
    }
  }
}

Node AssembleLoadResult(const nlohmann::json& common, const LoadPieces& pieces, Node loaded) {
  Node merged = CommonFromJson(common);
  Merge(merged, pieces.nonpersistent);
  Merge(merged, std::move(loaded));
  ApplyFactoryMerges(merged, pieces.factories);
  return merged;
}

}  // namespace distckpt
