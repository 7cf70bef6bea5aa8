#include "engine/read_state.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/helper_pool.h"
#include "core/json_parse.h"
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

const StoredObject& StoredFor(const CheckpointMetadata& md, const ShardedObject& request) {
  std::string unique_key = request.UniqueKey();
  auto it = md.objects.find(unique_key);
  if (it == md.objects.end()) FailUnknownKey(md, unique_key);
  return it->second;
}

// One shard leaf of a request: the leaf, its slot in the result (null when
// only planning) and, for a ShardedTensor, the stored tensor of its key
// (null for an unknown key, which fails where the leaf is read or planned).
struct ShardLeaf {
  const Node* leaf = nullptr;
  Node* slot = nullptr;
  const StoredTensor* stored = nullptr;
};

// Appends the shard leaves of `x` in ForEachLeaf's order. With `slot`, also
// builds there `x`'s dicts and lists, in place, with each shard leaf an
// undefined Tensor (the slot for what is loaded) and other leaves copied:
// the result's shape without a copy of the shards' metadata.
void CollectShards(const CheckpointMetadata& md, const Node& x, Node* slot,
                   std::vector<ShardLeaf>& out) {
  if (const Dict* d = x.get_if<Dict>()) {
    Dict* built = slot ? &(*slot = Node(Dict())).as<Dict>() : nullptr;
    for (const auto& [key, value] : *d) {
      Node* child = built ? &built->emplace_hint(built->end(), key, Node())->second : nullptr;
      CollectShards(md, value, child, out);
    }
  } else if (const List* l = x.get_if<List>()) {
    List* built = slot ? &(*slot = Node(List(l->size()))).as<List>() : nullptr;
    for (size_t i = 0; i < l->size(); ++i)
      CollectShards(md, (*l)[i], built ? &(*built)[i] : nullptr, out);
  } else if (const ShardedTensor* t = x.get_if<ShardedTensor>()) {
    auto it = md.tensors.find(t->key);
    out.push_back({&x, slot, it == md.tensors.end() ? nullptr : &it->second});
    if (slot) *slot = Node(Tensor());
  } else if (x.is<ShardedObject>()) {
    out.push_back({&x, slot, nullptr});
    if (slot) *slot = Node(Tensor());
  } else if (slot) {
    *slot = x;
  }
}

const StoredTensor& StoredFor(const CheckpointMetadata& md, const ShardLeaf& leaf) {
  if (!leaf.stored) FailUnknownKey(md, leaf.leaf->as<ShardedTensor>().key);
  return *leaf.stored;
}

// Chunk indexes of the stored tensors that serve more than one requested
// piece and hold at least kIndexMinChunks chunks (fewer are scanned as fast):
// built once per key per read or plan, then shared read-only by its workers.
constexpr size_t kIndexMinChunks = 64;
using ChunkIndexes = std::unordered_map<const StoredTensor*, ChunkIndex>;

ChunkIndexes IndexChunks(const std::vector<ShardLeaf>& leaves) {
  std::unordered_map<const StoredTensor*, size_t> pieces;
  for (const ShardLeaf& leaf : leaves) {
    if (leaf.stored && leaf.stored->chunks.size() >= kIndexMinChunks) ++pieces[leaf.stored];
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

// A tensor leaf being read: its destination, the host buffer its plan reads
// into (the destination, or page-locked staging for a device one), the plan.
struct TensorLoad {
  Tensor dst;
  Tensor host;
  std::shared_ptr<StagingBuffer> staged;
  bool widen_on_device = false;
  const StoredTensor* stored = nullptr;
  TensorPlan plan;
  PlanBytes bytes;
};

// Plans `leaf` and adds its reads to `reads` (read when it is flushed).
TensorLoad StartTensor(const CheckpointMetadata& md, const ShardLeaf& leaf,
                       const ChunkIndexes& indexes, PlanReads& reads) {
  TensorLoad load;
  load.stored = &StoredFor(md, leaf);
  const StoredTensor& stored = *load.stored;
  const ShardedTensor& request = leaf.leaf->as<ShardedTensor>();

  load.dst = request.data;
  Shape local = request.DataShape();
  if (!load.dst.defined()) load.dst = Tensor::Empty(request.dtype, local);
  // A device destination is read into a page-locked host buffer, then
  // copied over; when the stored dtype widens into the requested one, the
  // narrower stored bytes cross and the device converts them.
  const Tensor& dst = load.dst;
  load.host = dst;
  load.widen_on_device = dst.on_cuda() && DeviceConvertible(stored.dtype, dst.dtype());
  if (dst.on_cuda()) {
    const DType host_dtype = load.widen_on_device ? stored.dtype : dst.dtype();
    load.staged =
        SharedStagingPool().Acquire(static_cast<size_t>(dst.numel()) * DTypeSize(host_dtype));
    load.host = Tensor::Wrap(load.staged->data(), host_dtype, local);
  }
  if (request.allow_shape_mismatch)
    std::fill(load.host.data(), load.host.data() + load.host.nbytes(), std::byte{0});
  load.plan = PlanWith(indexes, stored, request);
  load.bytes = reads.Add(stored, load.plan, load.host);
  return load;
}

// The loaded tensor, once `load`'s reads are flushed.
Tensor FinishTensor(TensorLoad& load, LoadSummary* summary) {
  Tensor& dst = load.dst;
  if (load.widen_on_device) {
    Tensor narrow = load.host.To(dst.device());
    ConvertOnDevice(narrow.raw_data(), load.stored->dtype, dst.raw_data(), dst.dtype(),
                    static_cast<size_t>(dst.numel()), dst.device());
  } else if (dst.on_cuda()) {
    dst.CopyFrom(load.host);
  }
  if (summary) {
    summary->bytes_needed += load.bytes.needed;
    summary->chunk_bytes += load.bytes.chunk_bytes;
    summary->bytes_loaded +=
        static_cast<uint64_t>(load.plan.elements_covered) * DTypeSize(dst.dtype());
  }
  return std::move(dst);
}

// Leaves are read in groups: consecutive tensor leaves with host
// destinations, up to kGroupBytes in all (a rank's chunks usually lie back to
// back in its file, so a group takes few system calls: CheckpointReader::
// ReadChunks); any other leaf alone. Returns where each group begins, and
// the end.
constexpr uint64_t kGroupBytes = 256 << 10;

std::vector<size_t> GroupLeaves(const std::vector<ShardLeaf>& leaves) {
  std::vector<size_t> begins;
  uint64_t bytes = 0;  // of the group being built
  bool closed = true;  // whether it takes no more leaves
  for (size_t i = 0; i < leaves.size(); ++i) {
    const ShardedTensor* t = leaves[i].leaf->get_if<ShardedTensor>();
    const uint64_t size = t ? static_cast<uint64_t>(t->LocalNumel()) * DTypeSize(t->dtype) : 0;
    const bool alone = !t || t->data.on_cuda() || size >= kGroupBytes;
    if (closed || alone || bytes + size > kGroupBytes) {
      begins.push_back(i);
      bytes = 0;
    }
    bytes += size;
    closed = alone;
  }
  begins.push_back(leaves.size());
  return begins;
}

nlohmann::json LoadObject(CheckpointReader& reader, const ShardedObject& request,
                          LoadSummary* summary) {
  const StoredObject& stored = StoredFor(reader.metadata(), request);
  std::string payload = reader.ReadObject(stored);
  if (summary) summary->bytes_needed += stored.length;
  CheckJsonDepth(payload, fmt::format("object '{}' in {}", stored.unique_key, stored.file));
  nlohmann::json value = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    Fail(ErrorKind::kCorruption, "object '{}' in {} is not valid JSON", stored.unique_key,
         stored.file);
  }
  return value;
}

}  // namespace

Node ReadShardedState(CheckpointReader& reader, const Node& sharded, VerifyPolicy policy,
                      LoadSummary* summary, int threads) {
  Node loaded;
  std::vector<ShardLeaf> leaves;
  CollectShards(reader.metadata(), sharded, &loaded, leaves);
  const ChunkIndexes indexes = IndexChunks(leaves);
  // Groups of leaves are read by a few workers (the reader serves
  // concurrent reads); each keeps its own byte counts and the first error
  // wins.
  const std::vector<size_t> groups = GroupLeaves(leaves);
  const size_t group_count = groups.size() - 1;
  if (threads <= 0) threads = HardwareThreads();
  threads = static_cast<int>(std::min<size_t>(threads, group_count));
  std::vector<LoadSummary> partial(std::max(threads, 1));
  std::vector<std::exception_ptr> errors(partial.size());
  std::atomic<size_t> next{0};
  auto work = [&](size_t worker) {
    try {
      PlanReads reads(reader, policy);
      std::vector<TensorLoad> loads;
      for (size_t g = next++; g < group_count; g = next++) {
        loads.clear();
        for (size_t i = groups[g]; i < groups[g + 1]; ++i) {
          const ShardLeaf& leaf = leaves[i];
          if (leaf.leaf->is<ShardedTensor>()) {
            loads.push_back(StartTensor(reader.metadata(), leaf, indexes, reads));
          } else {
            *leaf.slot = Node(LoadObject(reader, leaf.leaf->as<ShardedObject>(), &partial[worker]));
          }
        }
        reads.Flush();
        for (size_t i = groups[g], k = 0; i < groups[g + 1]; ++i) {
          if (leaves[i].leaf->is<ShardedTensor>())
            *leaves[i].slot = Node(FinishTensor(loads[k++], &partial[worker]));
        }
      }
    } catch (...) {
      errors[worker] = std::current_exception();
      next = group_count;  // stop the others early
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
  std::vector<ShardLeaf> leaves;
  CollectShards(md, sharded, nullptr, leaves);
  const ChunkIndexes indexes = IndexChunks(leaves);
  for (const ShardLeaf& leaf : leaves) {
    if (const ShardedTensor* t = leaf.leaf->get_if<ShardedTensor>()) {
      const StoredTensor& stored = StoredFor(md, leaf);
      TensorPlan plan = PlanWith(indexes, stored, *t);
      if (summary) {
        for (const ChunkPlan& c : plan.chunks) {
          summary->bytes_needed += static_cast<uint64_t>(c.elements) * DTypeSize(stored.dtype);
          summary->chunk_bytes += stored.chunks[c.chunk_index].length;
        }
      }
    } else {
      const StoredObject& stored = StoredFor(md, leaf.leaf->as<ShardedObject>());
      if (summary) summary->bytes_needed += stored.length;
    }
  }
}

std::vector<const StoredChunk*> PlannedChunks(const CheckpointReader& reader, const Node& sharded) {
  std::vector<const StoredChunk*> chunks;
  try {
    std::vector<ShardLeaf> leaves;
    CollectShards(reader.metadata(), sharded, nullptr, leaves);
    const ChunkIndexes indexes = IndexChunks(leaves);
    for (const ShardLeaf& leaf : leaves) {
      const ShardedTensor* t = leaf.leaf->get_if<ShardedTensor>();
      if (!t || !leaf.stored) continue;
      try {
        for (const ChunkPlan& c : PlanWith(indexes, *leaf.stored, *t).chunks)
          chunks.push_back(&leaf.stored->chunks[c.chunk_index]);
      } catch (const std::exception&) {
        // Its read reports it.
      }
    }
  } catch (const std::exception&) {
    // The read reports it.
  }
  return chunks;
}

Node AssembleLoadResult(const nlohmann::json& common, const LoadPieces& pieces, Node loaded) {
  Node merged = CommonFromJson(common);
  Merge(merged, pieces.nonpersistent);
  Merge(merged, std::move(loaded));
  ApplyFactoryMerges(merged, pieces.factories);
  return merged;
}

}  // namespace distckpt
