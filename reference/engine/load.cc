#include "engine/load.h"

#include <chrono>
#include <set>

#include "core/error.h"
#include "engine/global_validation.h"
#include "engine/read_state.h"
#include "mapping/dict_utils.h"
#include "strategy/strategy.h"

namespace distckpt {
namespace {

std::set<std::string> RequestedKeys(const Node& sharded) {
  std::set<std::string> keys;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) keys.insert(t->key);
    if (const ShardedObject* o = leaf.get_if<ShardedObject>()) keys.insert(o->key);
  });
  return keys;
}

// Union of every rank's requested keys (one all-gather).
std::set<std::string> AllRanksKeys(const std::set<std::string>& mine, Communicator& comm) {
  std::set<std::string> all;
  for (const std::string& s : comm.AllGather(nlohmann::json(mine).dump())) {
    for (const auto& key : nlohmann::json::parse(s)) all.insert(key.get<std::string>());
  }
  return all;
}

}  // namespace

LoadResult Load(const Node& request, const std::string& dir, Communicator& comm,
                const LoadOptions& options) {
  auto start = std::chrono::steady_clock::now();
  Env* env = options.env ? options.env : Env::Default();
  std::unique_ptr<CheckpointReader> reader;
  AgreeOnOutcome(comm, [&] { reader = DetectFormat(env, dir).OpenReader(env, dir); });
  const double open_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LoadResult result = Load(request, *reader, comm, options);
  result.summary.seconds += open_seconds;  // the load's time includes the open
  return result;
}

LoadResult Load(const Node& request, CheckpointReader& reader, Communicator& comm,
                const LoadOptions& options) {
  auto start = std::chrono::steady_clock::now();
  LoadResult result;

  LoadPieces pieces;
  AgreeOnOutcome(comm, [&] { pieces = LoadPreprocess(request); });

  if (RequiresExplicitCkptMismatchCheck(options.strict)) {
    std::set<std::string> mine = RequestedKeys(pieces.sharded());
    std::set<std::string> all;
    if (RequiresGlobalAppMetadata(options.strict)) all = AllRanksKeys(mine, comm);
    AgreeOnOutcome(comm, [&] {
      std::vector<std::string> stored = reader.metadata().Keys();
      std::string log;
      result.mismatch = ApplyStrictHandling(options.strict, pieces.mutable_sharded(),
                                            {stored.begin(), stored.end()}, all, &log);
      if (!log.empty()) result.summary.warnings.push_back(std::move(log));
    });
  }
  if (options.validate_access_integrity) ValidateGlobalSharding(pieces.sharded(), comm);

  // The ranks on this machine load at once: each takes its share of the
  // hardware threads as readers (8 ranks on 2 cores read with one each rather
  // than 16 threads contending for 2 cores).
  const int readers = ThreadsPerRank(comm);
  ReadShardsFn read = [&](const Node& sharded) {
    return ReadShardedState(reader, sharded, options.verify, &result.summary, readers);
  };
  if (options.plan_only) {
    AgreeOnOutcome(comm, [&] { PlanShardedState(reader, pieces.sharded(), &result.summary); });
    result.summary.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  // Ranks share what each would read alike before its chunks (a DCP data
  // file's item index): one reads each piece, the others check what they
  // receive (collective; the same on every rank).
  reader.PrepareReads([&] { return PlannedChunks(reader, pieces.sharded()); }, comm);
  Node loaded =
      LoadSharded(options.strategy, pieces.sharded(), read, comm, &result.summary.exchange);

  AgreeOnOutcome(comm, [&] {
    result.state_dict = AssembleLoadResult(reader.metadata().common, pieces, std::move(loaded));
  });
  result.summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace distckpt
