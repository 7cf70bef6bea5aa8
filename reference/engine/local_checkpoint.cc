#include "engine/local_checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/local_blob.h"
#include "strategy/local_store.h"
#include "strategy/replication.h"

namespace distckpt {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This rank's replication clique (sorted) and a communicator over it, in
// that order. Collective over `comm`.
struct Clique {
  std::vector<int> members;
  std::unique_ptr<Communicator> comm;
  int PositionOf(int rank) const {
    return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  }
};

Clique JoinClique(const LocalOptions& options, Communicator& comm) {
  Clique clique;
  int color = comm.rank();
  AgreeOnOutcome(comm, [&] {
    if (options.groups.empty()) {
      clique.members = {comm.rank()};
      return;
    }
    color = GroupIndexOf(options.groups, comm.size(), comm.rank());
    clique.members = options.groups[color];
    std::sort(clique.members.begin(), clique.members.end());
  });
  clique.comm = comm.Split(color, comm.rank());
  return clique;
}

// Every rank's local files (all-gathered), as rank -> ids held.
std::vector<std::set<LocalFileId>> HeldEverywhere(const LocalStore& store, Communicator& comm) {
  nlohmann::json mine = nlohmann::json::array();
  AgreeOnOutcome(comm, [&] {
    for (const LocalFileId& id : store.List()) mine.push_back({id.iteration, id.owner});
  });
  std::vector<std::set<LocalFileId>> held;
  for (const std::string& bytes : comm.AllGather(mine.dump())) {
    std::set<LocalFileId>& ids = held.emplace_back();
    for (const auto& pair : nlohmann::json::parse(bytes))
      ids.insert({pair[0].get<int64_t>(), pair[1].get<int>()});
  }
  return held;
}

// The members of `rank`'s clique that hold its file of `iteration`.
std::vector<int> Holders(const std::vector<std::set<LocalFileId>>& held,
                         const LocalOptions& options, int rank, int64_t iteration) {
  std::vector<int> clique =
      options.groups.empty()
          ? std::vector<int>{rank}
          : options.groups[GroupIndexOf(options.groups, static_cast<int>(held.size()), rank)];
  std::sort(clique.begin(), clique.end());
  std::vector<int> holders;
  for (int member : clique) {
    if (held[member].contains({iteration, rank})) holders.push_back(member);
  }
  return holders;
}

// NVRx's find_latest: the newest iteration every rank can recover.
int64_t RecoverableIteration(const std::vector<std::set<LocalFileId>>& held,
                             const LocalOptions& options) {
  std::set<int64_t, std::greater<>> iterations;
  for (const auto& ids : held) {
    for (const LocalFileId& id : ids) iterations.insert(id.iteration);
  }
  if (iterations.empty()) {
    Fail(ErrorKind::kIncomplete, "no local checkpoint under {} on any rank", options.root);
  }
  for (int64_t iteration : iterations) {
    bool complete = true;
    for (int r = 0; r < static_cast<int>(held.size()) && complete; ++r) {
      complete = !Holders(held, options, r, iteration).empty();
    }
    if (complete) return iteration;
  }
  const int64_t newest = *iterations.begin();
  for (int r = 0; r < static_cast<int>(held.size()); ++r) {
    if (Holders(held, options, r, newest).empty()) {
      Fail(ErrorKind::kIncomplete,
           "no replicas available for rank {} (iteration {}): no member of its replication group "
           "holds {} "
           "under {}",
           r, newest, LocalFileName({newest, r}), options.root);
    }
  }
  Fail(ErrorKind::kIncomplete, "no complete local checkpoint under {}", options.root);
}

}  // namespace

SaveSummary SaveLocal(const Node& state_dict, int64_t iteration, Communicator& comm,
                      const LocalOptions& options) {
  const Clock::time_point start = Clock::now();
  Env* env = options.env ? options.env : Env::Default();
  SaveSummary summary;
  std::string blob;
  AgreeOnOutcome(comm, [&] { blob = SerializeLocalState(state_dict, iteration, comm.rank()); });
  Clique clique = JoinClique(options, comm);
  std::vector<std::string> blobs = clique.comm->AllGather(blob);  // replication
  blob.clear();

  LocalStore store(env, options.root, comm.rank());
  try {
    AgreeOnOutcome(comm, [&] {
      for (size_t i = 0; i < blobs.size(); ++i) {
        store.Write({iteration, clique.members[i]}, std::as_bytes(std::span(blobs[i])));
        summary.bytes_written += blobs[i].size();
        ++summary.chunks_written;
      }
    });
  } catch (const CheckpointError&) {
    try {  // no partial iteration on any rank; the previous one stays
      store.RemoveIteration(iteration);
    } catch (const CheckpointError&) {
      // Best effort: the failure being reported matters more.
    }
    throw;
  }
  // Every rank has the new iteration: only now do older ones go.
  AgreeOnOutcome(comm, [&] { store.RemoveOlderThan(iteration); });
  summary.seconds = SecondsSince(start);
  return summary;
}

LocalLoadResult LoadLocal(const Node& request, Communicator& comm, const LocalOptions& options) {
  const Clock::time_point start = Clock::now();
  Env* env = options.env ? options.env : Env::Default();
  LocalLoadResult result;
  Clique clique = JoinClique(options, comm);
  LocalStore store(env, options.root, comm.rank());
  std::vector<std::set<LocalFileId>> held = HeldEverywhere(store, comm);
  AgreeOnOutcome(comm, [&] { result.iteration = RecoverableIteration(held, options); });

  // Which clique member sends each missing file: seeded, the same on every member.
  std::mt19937 random(0);
  std::map<int, int> sender;  // owner -> holder
  for (int member : clique.members) {
    if (held[member].contains({result.iteration, member})) continue;
    std::vector<int> holders = Holders(held, options, member, result.iteration);
    sender[member] = holders[random() % holders.size()];
  }
  // Read first (own file, files to send), then exchange: no failure mid-way.
  std::string mine;
  std::map<int, std::string> outgoing;
  AgreeOnOutcome(comm, [&] {
    if (!sender.contains(comm.rank())) mine = store.Read({result.iteration, comm.rank()});
    for (const auto& [owner, holder] : sender) {
      if (holder == comm.rank()) outgoing[owner] = store.Read({result.iteration, owner});
    }
  });
  for (const auto& [owner, holder] : sender) {
    std::string payload = holder == comm.rank() ? std::move(outgoing[owner]) : std::string();
    clique.comm->Broadcast(payload, clique.PositionOf(holder));
    if (owner == comm.rank()) {
      mine = std::move(payload);
      result.recovered_from_peer = true;
    }
  }
  AgreeOnOutcome(comm, [&] {
    result.state_dict =
        LoadLocalState(mine, request, result.iteration, comm.rank(), &result.summary);
  });
  result.summary.seconds = SecondsSince(start);
  return result;
}

}  // namespace distckpt
