#include "strategy/exchange.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "mapping/dict_utils.h"
#include "mapping/py_format.h"

namespace distckpt {
namespace {

// A shard on the wire: status byte, then dtype byte and the raw bytes, or
// (status kFailed) the ErrorKind byte and the message.
constexpr char kOk = 0;
constexpr char kFailed = 1;

std::string EncodeShard(const Tensor& tensor) {
  std::string payload(2 + tensor.nbytes(), '\0');
  payload[0] = kOk;
  payload[1] = static_cast<char>(tensor.dtype());
  if (tensor.nbytes() > 0) std::memcpy(payload.data() + 2, tensor.data(), tensor.nbytes());
  return payload;
}

std::string EncodeFailure(ErrorKind kind, std::string_view message) {
  std::string payload{kFailed, static_cast<char>(kind)};
  payload += message;
  return payload;
}

// Runs `provide` and encodes its tensor, or the failure it threw.
std::string ProvidePayload(const ProvideShardFn& provide, const ShardId& id) {
  try {
    return EncodeShard(provide(id));
  } catch (const CheckpointError& e) {
    return EncodeFailure(e.kind(), e.what());
  } catch (const std::exception& e) {
    return EncodeFailure(ErrorKind::kInvalidArgument, e.what());
  }
}

Shape LocalDataShape(const ShardedTensor& request) {
  return request.flattened_range ? Shape{request.flattened_range->size()} : request.local_shape;
}

bool IsFailure(const std::string& payload) { return payload.size() >= 2 && payload[0] == kFailed; }

[[noreturn]] void ThrowFailure(const std::string& payload, int owner, const ShardId& id) {
  throw CheckpointError(static_cast<ErrorKind>(payload[1]),
                        fmt::format("reading shard {} failed on group rank {}: {}", id.ToString(),
                                    owner, std::string_view(payload).substr(2)));
}

// Decodes a payload from group rank `owner` into this rank's destination.
Tensor Receive(const std::string& payload, int owner, const ShardId& id,
               const ShardedTensor& request) {
  if (IsFailure(payload)) ThrowFailure(payload, owner, id);
  if (payload.size() < 2) {
    Fail(ErrorKind::kIncomplete, "shard {} was not loaded by its reader (group rank {})",
         id.ToString(), owner);
  }
  const DType src = static_cast<DType>(payload[1]);
  const Shape shape = LocalDataShape(request);
  const size_t n = static_cast<size_t>(Volume(shape));
  if (payload.size() - 2 != n * DTypeSize(src)) {
    Fail(ErrorKind::kShapeMismatch,
         "shard {} arrived from group rank {} with {} bytes of {}, but this rank requests {} "
         "elements",
         id.ToString(), owner, payload.size() - 2, DTypeName(src), n);
  }
  Tensor dst = request.data.defined() ? request.data : Tensor::Empty(request.dtype, shape);
  if (src == dst.dtype()) {
    if (n > 0) std::memcpy(dst.data(), payload.data() + 2, payload.size() - 2);
  } else {
    ConvertElements(payload.data() + 2, src, dst.data(), dst.dtype(), n);
  }
  return dst;
}

// Receives `payload` if this rank wants `route`'s shard; remembers the first failure.
void Deliver(const std::string& payload, const ShardRoute& route,
             const std::map<ShardId, ShardedTensor>& wanted, std::map<ShardId, Tensor>& out,
             std::optional<CheckpointError>& failure, ExchangeStats& stats) {
  auto want = wanted.find(route.id);
  // A failed read concerns every rank of the group, wanted or not.
  if (want == wanted.end() && !IsFailure(payload)) return;
  try {
    if (want == wanted.end()) ThrowFailure(payload, route.owner, route.id);
    Tensor t = Receive(payload, route.owner, route.id, want->second);
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
  for (const ShardRoute& route : routes) {
    std::string payload;
    if (group.rank() == route.owner) payload = ProvidePayload(provide, route.id);
    group.Broadcast(payload, route.owner);
    ++local.collectives;
    local.peak_buffer_bytes = std::max<uint64_t>(local.peak_buffer_bytes, payload.size());
    Deliver(payload, route, wanted, out, failure, local);
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
        contribution = ProvidePayload(
            [&](const ShardId& id) {
              auto it = loaded.find(id);
              if (it == loaded.end())
                Fail(ErrorKind::kIncomplete, "shard {} was not loaded", id.ToString());
              return it->second;
            },
            mine[k]->id);
      }
      std::vector<std::string> all = group.AllGather(contribution);
      ++local.collectives;
      uint64_t round_bytes = contribution.size();
      for (const std::string& s : all) round_bytes += s.size();
      local.peak_buffer_bytes = std::max(local.peak_buffer_bytes, round_bytes);
      for (int r = 0; r < group.size(); ++r) {
        if (r == group.rank() || k >= per_rank[r].size()) continue;
        Deliver(all[r], *per_rank[r][k], wanted, out, failure, local);
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
      if (!t->data.defined() || t->data.data() == source.data()) {
        leaf = Node(source);
        return;
      }
      if (t->data.nbytes() != source.nbytes() || t->data.dtype() != source.dtype()) {
        Fail(ErrorKind::kShapeMismatch, "loaded shard of {} does not fit its destination",
             t->ToString());
      }
      Tensor dst = t->data;  // shares the leaf's storage
      if (source.nbytes() > 0) std::memcpy(dst.data(), source.data(), source.nbytes());
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
