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

// Every rank's commit records (all-gathered, merged): iteration -> world.
std::map<int64_t, int> CommitsEverywhere(const LocalStore& store, Communicator& comm) {
  nlohmann::json mine = nlohmann::json::array();
  std::string error;
  try {
    for (const auto& [iteration, world] : store.Commits()) mine.push_back({iteration, world});
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  std::map<int64_t, int> commits;
  for (const std::string& bytes : comm.AllGather(error.empty() ? mine.dump() : "E" + error)) {
    if (!bytes.empty() && bytes[0] == 'E') Fail(ErrorKind::kCorruption, "{}", bytes.substr(1));
    for (const auto& pair : nlohmann::json::parse(bytes)) {
      commits[pair[0].get<int64_t>()] = pair[1].get<int>();
    }
  }
  return commits;
}

// Drops the files of iterations without a commit record (a save killed or
// failed before every rank wrote: its files may mix with nothing, but are
// not a checkpoint). The newest committed iteration must have been saved by
// this world: a smaller world's save leaves the larger world's older files
// on the ranks it did not have, and those must not load as current.
void KeepCommitted(std::vector<std::set<LocalFileId>>& held, const std::map<int64_t, int>& commits,
                   int world, const LocalOptions& options) {
  if (!commits.empty() && commits.rbegin()->second != world) {
    Fail(ErrorKind::kIncomplete,
         "the newest local checkpoint under {} (iteration {}) was saved by {} ranks; this load "
         "runs {}: refusing to mix it with older files",
         options.root, commits.rbegin()->first, commits.rbegin()->second, world);
  }
  for (std::set<LocalFileId>& ids : held) {
    std::erase_if(ids, [&](const LocalFileId& id) {
      auto it = commits.find(id.iteration);
      return it == commits.end() || it->second != world;
    });
  }
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
  LocalStore store(env, options.root, comm.rank());
  // Iterations are never reused: a save that fails removes only its own
  // iteration's files, never a previous good checkpoint's.
  int64_t newest = 0;
  AgreeOnOutcome(comm, [&] {
    for (const LocalFileId& id : store.List()) newest = std::max(newest, id.iteration);
    for (const auto& [i, world] : store.Commits()) newest = std::max(newest, i);
  });
  for (const std::string& n : comm.AllGather(std::to_string(newest))) {
    newest = std::max<int64_t>(newest, std::stoll(n));
  }
  if (iteration == kNextLocalIteration) iteration = newest + 1;
  if (iteration <= newest) {
    Fail(ErrorKind::kInvalidArgument,
         "local checkpoint iteration {} is not newer than iteration {} already under {} (pass a "
         "newer iteration, or kNextLocalIteration)",
         iteration, newest, options.root);
  }
  std::string blob;
  AgreeOnOutcome(comm, [&] { blob = SerializeLocalState(state_dict, iteration, comm.rank()); });
  Clique clique = JoinClique(options, comm);
  std::vector<std::string> blobs = clique.comm->AllGather(blob);  // replication
  blob.clear();

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
  // Every rank has the new iteration: commit it (the record names the world,
  // so a load by another world refuses it), and only then do older ones go.
  AgreeOnOutcome(comm, [&] { store.WriteCommit(iteration, comm.size()); });
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
  const std::map<int64_t, int> commits = CommitsEverywhere(store, comm);  // same on every rank
  AgreeOnOutcome(comm, [&] {
    KeepCommitted(held, commits, comm.size(), options);
    result.iteration = RecoverableIteration(held, options);
  });

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
