#include "strategy/exchange.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "mapping/dict_utils.h"
#include "mapping/py_format.h"
#include "wire/messages.h"

namespace distckpt {
namespace {

// Runs `provide`: the shard's tensor, or the failure it threw in `header`.
Tensor Provide(const ProvideShardFn& provide, const ShardId& id, ShardHeader& header) {
  try {
    Tensor t = provide(id);
    header.dtype = t.dtype();
    header.nbytes = t.nbytes();
    return t;
  } catch (const CheckpointError& e) {
    header.failure = e;
  } catch (const std::exception& e) {
    header.failure.emplace(ErrorKind::kInvalidArgument, e.what());
  }
  return Tensor();
}

// The bytes of `request`'s local data in dtype `src`.
uint64_t ExpectedBytes(const ShardedTensor& request, DType src) {
  return static_cast<uint64_t>(Volume(request.DataShape())) * DTypeSize(src);
}

// `bytes` of dtype `src` from group rank `owner`, in this rank's destination.
Tensor Convert(std::span<const std::byte> bytes, DType src, int owner, const ShardId& id,
               const ShardedTensor& request) {
  const Shape shape = request.DataShape();
  const size_t n = static_cast<size_t>(Volume(shape));
  if (bytes.size() != n * DTypeSize(src)) {
    Fail(ErrorKind::kShapeMismatch,
         "shard {} arrived from group rank {} with {} bytes of {}, but this rank requests {} "
         "elements",
         id.ToString(), owner, bytes.size(), DTypeName(src), n);
  }
  Tensor dst = request.data.defined() ? request.data : Tensor::Empty(request.dtype, shape);
  Tensor host = dst.on_cuda() ? Tensor::Empty(dst.dtype(), shape) : dst;
  if (src == dst.dtype()) {
    if (n > 0) std::memcpy(host.data(), bytes.data(), bytes.size());
  } else {
    ConvertElements(bytes.data(), src, host.data(), dst.dtype(), n);
  }
  if (dst.on_cuda()) dst.CopyFrom(host);
  return dst;
}

// A failed read concerns every rank of the group, wanted or not.
CheckpointError OwnerFailure(const CheckpointError& failure, int owner, const ShardId& id) {
  return CheckpointError(failure.kind(), fmt::format("reading shard {} failed on group rank {}: {}",
                                                     id.ToString(), owner, failure.what()));
}

// Takes a received shard (`header` and its `bytes`) if this rank wants it;
// remembers the first failure.
void Deliver(const ShardHeader& header, std::span<const std::byte> bytes, const ShardRoute& route,
             const std::map<ShardId, ShardedTensor>& wanted, std::map<ShardId, Tensor>& out,
             std::optional<CheckpointError>& failure, ExchangeStats& stats) {
  if (header.failure) {
    if (!failure) failure = OwnerFailure(*header.failure, route.owner, route.id);
    return;
  }
  auto want = wanted.find(route.id);
  if (want == wanted.end()) return;
  try {
    Tensor t = Convert(bytes, header.dtype, route.owner, route.id, want->second);
    stats.bytes_received += t.nbytes();
    out[route.id] = std::move(t);
  } catch (const CheckpointError& e) {
    if (!failure) failure = e;
  }
}

// Adds one exchange's `local` figures to `stats` (if any), then throws the
// first failure every rank saw or returns the received shards.
std::map<ShardId, Tensor> Finish(std::map<ShardId, Tensor> out, const ExchangeStats& local,
                                 const std::optional<CheckpointError>& failure,
                                 ExchangeStats* stats) {
  if (stats) {
    stats->collectives += local.collectives;
    stats->bytes_received += local.bytes_received;
    stats->peak_buffer_bytes = std::max(stats->peak_buffer_bytes, local.peak_buffer_bytes);
  }
  if (failure) throw *failure;
  return out;
}

}  // namespace

ExchangeAlgorithm ParseExchangeAlgorithm(std::string_view name) {
  if (name == "broadcast") return ExchangeAlgorithm::kBroadcast;
  if (name == "gather_rounds") return ExchangeAlgorithm::kGatherRounds;
  Fail(ErrorKind::kInvalidArgument,
       "Unrecognized gather algorithm: {} (broadcast or gather_rounds)", name);
}

std::string_view ExchangeAlgorithmName(ExchangeAlgorithm algorithm) {
  return algorithm == ExchangeAlgorithm::kBroadcast ? "broadcast" : "gather_rounds";
}

std::vector<ShardRoute> RoutesOf(const ShardDistribution& distribution) {
  std::vector<ShardRoute> routes;
  for (const auto& [id, owner] : distribution.assignment) {
    const std::vector<int>& holders = distribution.all_ranks_for_shard.at(id);
    if (holders.size() <= 1) continue;  // needed by its reader only
    routes.push_back({id, owner, holders, distribution.shard_to_metadata.at(id).dtype});
  }
  return routes;
}

std::map<ShardId, Tensor> BroadcastShards(const std::vector<ShardRoute>& routes,
                                          const ProvideShardFn& provide,
                                          const std::map<ShardId, ShardedTensor>& wanted,
                                          Communicator& group, ExchangeStats* stats) {
  ExchangeStats local;
  std::map<ShardId, Tensor> out;
  std::optional<CheckpointError> failure;
  // Each shard takes two broadcasts: its header (wire/messages.h, a few
  // bytes), then its bytes, straight from the owner's tensor into a holder's
  // destination. Only a rank that does not want the shard, or converts its
  // dtype, receives into `scratch`, one buffer reused across shards (a fresh
  // buffer per shard costs a page fault per page: 0.03 of the raw load
  // bandwidth with 64 MiB shards, bench/mpi_bandwidth).
  std::vector<std::byte> scratch;
  for (const ShardRoute& route : routes) {
    ++local.collectives;
    ShardHeader header;
    Tensor provided;
    std::string message;
    if (group.rank() == route.owner) {
      provided = Provide(provide, route.id, header);
      message = EncodeShardHeader(header);
    }
    group.Broadcast(message, route.owner);
    if (group.rank() != route.owner) header = DecodeShardHeader(message, route.owner);
    if (header.failure) {
      Deliver(header, {}, route, wanted, out, failure, local);
      continue;
    }
    // Device memory goes to the communicator as it is when it takes device
    // memory (NCCL), else through `scratch`.
    auto in_place = [&](Tensor& t) {
      return !t.on_cuda() || group.device_memory() ? std::span<std::byte>(t.raw_data(), t.nbytes())
                                                   : std::span<std::byte>();
    };
    auto use_scratch = [&] {
      scratch.resize(header.nbytes);
      local.peak_buffer_bytes = std::max<uint64_t>(local.peak_buffer_bytes, header.nbytes);
      return std::span<std::byte>(scratch);
    };
    std::span<std::byte> bytes;
    Tensor direct;  // the destination, when the bytes can land in it as they are
    auto want = wanted.find(route.id);
    if (group.rank() == route.owner) {
      bytes = in_place(provided);
      if (bytes.size() != header.nbytes) {
        bytes = use_scratch();
        CopyMemory(bytes.data(), Device::Cpu(), provided.raw_data(), provided.device(),
                   bytes.size());
      }
    } else if (want != wanted.end() && want->second.dtype == header.dtype &&
               ExpectedBytes(want->second, header.dtype) == header.nbytes) {
      direct = want->second.data.defined()
                   ? want->second.data
                   : Tensor::Empty(want->second.dtype, want->second.DataShape());
      bytes = in_place(direct);
    }
    if (bytes.size() != header.nbytes) bytes = use_scratch();  // not received in place
    group.BroadcastBytes(bytes, route.owner);
    if (group.rank() == route.owner) continue;
    if (direct.defined()) {
      if (bytes.data() != direct.raw_data() && header.nbytes > 0) {
        CopyMemory(direct.raw_data(), direct.device(), bytes.data(), Device::Cpu(), bytes.size());
      }
      local.bytes_received += header.nbytes;
      out[route.id] = std::move(direct);
    } else {
      Deliver(header, scratch, route, wanted, out, failure, local);
    }
  }
  return Finish(std::move(out), local, failure, stats);
}

std::map<ShardId, Tensor> GatherRoundsShards(const std::vector<ShardRoute>& routes,
                                             const std::map<ShardId, Tensor>& loaded,
                                             const std::map<ShardId, ShardedTensor>& wanted,
                                             Communicator& group, ExchangeStats* stats) {
  // dtype name -> group rank -> the routes it owns, in assignment order.
  std::map<std::string_view, std::vector<std::vector<const ShardRoute*>>> by_dtype;
  for (const ShardRoute& route : routes) {
    auto& per_rank = by_dtype[DTypeName(route.dtype)];
    per_rank.resize(group.size());
    per_rank[route.owner].push_back(&route);
  }
  ExchangeStats local;
  std::map<ShardId, Tensor> out;
  std::optional<CheckpointError> failure;
  for (const auto& [dtype, per_rank] : by_dtype) {
    size_t rounds = 0;
    for (const auto& owned : per_rank) rounds = std::max(rounds, owned.size());
    const auto& mine = per_rank[group.rank()];
    for (size_t k = 0; k < rounds; ++k) {
      std::string contribution;
      if (k < mine.size()) {
        ShardHeader header;
        Tensor t = Provide(
            [&](const ShardId& id) {
              auto it = loaded.find(id);
              if (it == loaded.end())
                Fail(ErrorKind::kIncomplete, "shard {} was not loaded", id.ToString());
              return it->second;
            },
            mine[k]->id, header);
        contribution = header.failure ? EncodeShardHeader(header)
                                      : EncodeShard(t.on_cuda() ? t.To(Device::Cpu()) : t);
      }
      std::vector<std::string> all = group.AllGather(contribution);
      ++local.collectives;
      uint64_t round_bytes = contribution.size();
      for (const std::string& s : all) round_bytes += s.size();
      local.peak_buffer_bytes = std::max(local.peak_buffer_bytes, round_bytes);
      for (int r = 0; r < group.size(); ++r) {
        if (r == group.rank() || k >= per_rank[r].size()) continue;
        std::span<const std::byte> bytes;
        const ShardHeader header = DecodeShard(all[r], r, &bytes);
        Deliver(header, bytes, *per_rank[r][k], wanted, out, failure, local);
      }
    }
  }
  return Finish(std::move(out), local, failure, stats);
}

Node ReplaceShardedLeaves(const Node& sharded, const std::map<ShardId, Tensor>& tensors,
                          const std::map<std::string, nlohmann::json>& objects) {
  Node out = sharded;
  ForEachLeaf(out, [&](const NodePath&, Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      if (HasNoElements(*t)) {  // never read nor exchanged
        leaf = Node(t->data.defined()
                        ? t->data
                        : Tensor::Empty(t->dtype, t->flattened_range ? Shape{0} : t->local_shape));
        return;
      }
      const Tensor& source = tensors.at(ShardIdOf(*t));
      if (!t->data.defined() || t->data.raw_data() == source.raw_data()) {
        leaf = Node(source);
        return;
      }
      if (t->data.nbytes() != source.nbytes() || t->data.dtype() != source.dtype()) {
        Fail(ErrorKind::kShapeMismatch, "loaded shard of {} does not fit its destination",
             t->ToString());
      }
      Tensor dst = t->data;  // shares the leaf's storage
      if (source.nbytes() > 0) dst.CopyFrom(source);
      leaf = Node(dst);
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      leaf = Node(objects.at(o->UniqueKey()));
    }
  });
  return out;
}

std::map<std::string, nlohmann::json> GatherObjects(
    const std::map<std::string, nlohmann::json>& loaded, Communicator& comm) {
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& [unique_key, value] : loaded) mine[unique_key] = value;
  std::map<std::string, nlohmann::json> all;
  std::set<std::string> duplicates;
  for (const std::string& bytes : comm.AllGather(mine.dump())) {
    const nlohmann::json rank_objects = nlohmann::json::parse(bytes);
    for (const auto& [unique_key, value] : rank_objects.items()) {
      if (!all.emplace(unique_key, value).second) duplicates.insert(unique_key);
    }
  }
  if (!duplicates.empty()) {
    Fail(ErrorKind::kInvalidSharding, "Duplicate shard ids loaded by different ranks: {}",
         PyStrSet(duplicates));
  }
  return all;
}

}  // namespace distckpt
