// In-process backend: every rank is a thread, every collective a rendezvous
// of the ranks of one Group (the world or a Split of it) under the world's
// mutex. Contributions are read in place from the callers' buffers, so a
// collective copies each payload only into the ranks that receive it.
#include "comm/thread_world.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "core/error.h"

namespace distckpt {
namespace {

// State shared by every communicator of one RunRanks world.
struct World {
  explicit World(int size) : waits(size) {}

  int size() const { return static_cast<int>(waits.size()); }

  // Records the first failure and wakes every blocked rank.
  void Abort(int rank, const std::string& message) {
    std::lock_guard lock(mu);
    AbortLocked(fmt::format("rank {} aborted: {}", rank, message));
  }
  void Finish() {
    std::lock_guard lock(mu);
    ++finished;
    CheckProgressLocked();
  }

  // The rest is called with `mu` held.
  void AbortLocked(std::string message) {
    if (!aborted) abort_message = std::move(message);
    aborted = true;
    cv.notify_all();
  }
  void BeginWait(int rank, std::string collective) {
    waits[rank] = std::move(collective);
    ++waiting;
    CheckProgressLocked();
  }
  void EndWait(int rank) {
    if (waits[rank].empty()) return;
    waits[rank].clear();
    --waiting;
  }
  // Once every rank waits in a collective that cannot complete or has
  // returned, nothing can ever change: aborts instead of hanging.
  void CheckProgressLocked() {
    const int size = static_cast<int>(waits.size());
    if (waiting == 0 || waiting + finished < size) return;
    std::string state;
    for (int r = 0; r < size; ++r) {
      if (r > 0) state += ", ";
      state += waits[r].empty() ? fmt::format("rank {} returned", r)
                                : fmt::format("rank {} waits in {}", r, waits[r]);
    }
    AbortLocked(fmt::format("deadlock: no rank can proceed ({})", state));
  }

  std::mutex mu;
  std::condition_variable cv;  // any change of any group's state below
  bool aborted = false;
  std::string abort_message;
  std::vector<std::string> waits;  // by world rank: the incomplete collective it waits in
  int waiting = 0;                 // non-empty `waits`
  int finished = 0;                // ranks whose function returned normally
};

enum class Op {
  kBarrier,
  kBroadcast,
  kBroadcastBytes,
  kGather,
  kAllGather,
  kAllReduce,
  kAllReduceBytes,
  kSplit
};

class Group;

// One rank's part in a collective. It lives on that rank's stack until every
// member has read it.
struct Slot {
  explicit Slot(Op op, int root = -1, const std::string* bytes = nullptr)
      : op(op), root(root), bytes(bytes) {}

  Op op;
  int root;
  const std::string* bytes;
  const void* values = nullptr;  // AllReduce*: `count` elements
  size_t count = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int color = 0;
  int key = 0;
  std::shared_ptr<Group> split_group;  // Split's result, set when the round completes
  int split_rank = -1;
};

std::string Describe(const Slot& slot) {
  static constexpr const char* kOps[] = {"min", "max", "sum"};
  switch (slot.op) {
    case Op::kBarrier:
      return "Barrier";
    case Op::kBroadcast:
      return fmt::format("Broadcast(root {})", slot.root);
    case Op::kBroadcastBytes:
      return fmt::format("BroadcastBytes({} bytes, root {})", slot.count, slot.root);
    case Op::kGather:
      return fmt::format("Gather(root {})", slot.root);
    case Op::kAllGather:
      return "AllGather";
    case Op::kAllReduce:
    case Op::kAllReduceBytes:
      return fmt::format("{}({} values, {})",
                         slot.op == Op::kAllReduce ? "AllReduce" : "AllReduceBytes", slot.count,
                         kOps[static_cast<int>(slot.reduce)]);
    case Op::kSplit:
      return "Split";
  }
  return "?";
}

// Empty when every rank called the same collective with the same shape.
std::string Mismatch(const std::vector<Slot*>& slots) {
  const std::string first = Describe(*slots[0]);
  for (size_t r = 1; r < slots.size(); ++r) {
    const std::string other = Describe(*slots[r]);
    if (first != other) {
      return fmt::format("collective mismatch: rank 0 called {} but rank {} called {}", first, r,
                         other);
    }
  }
  return "";
}

using Hook = std::function<void(const std::vector<Slot*>&)>;

// The ranks of one communicator and the state of their current collective.
class Group {
 public:
  Group(std::shared_ptr<World> world, std::vector<int> world_ranks)
      : world_(std::move(world)),
        world_ranks_(std::move(world_ranks)),
        slots_(world_ranks_.size(), nullptr) {}

  int size() const { return static_cast<int>(world_ranks_.size()); }
  const std::shared_ptr<World>& world() const { return world_; }
  int world_rank(int rank) const { return world_ranks_[rank]; }

  // One collective round. Waits until every member has contributed `slot`;
  // the member completing the round runs `complete` under the lock; then every
  // member runs `read` concurrently, and none returns before all have read.
  // Throws kComm when the world aborts or deadlocks before the round completes.
  void Run(int rank, Slot* slot, const Hook& complete, const Hook& read) {
    std::string error;
    {
      std::unique_lock lock(world_->mu);
      if (world_->aborted) throw CheckpointError(ErrorKind::kComm, world_->abort_message);
      const uint64_t round = round_;
      slots_[rank] = slot;
      if (++arrived_ == size()) {
        CompleteRound(complete);
      } else {
        world_->BeginWait(world_ranks_[rank], Describe(*slot));
        world_->cv.wait(lock, [&] { return round_ != round || world_->aborted; });
        if (round_ == round) {  // aborted: the round can never complete
          world_->EndWait(world_ranks_[rank]);
          slots_[rank] = nullptr;
          --arrived_;
          throw CheckpointError(ErrorKind::kComm, world_->abort_message);
        }
      }
      error = round_error_;
    }
    // Every member is inside this call, so nothing here can wait on user code:
    // the rest ignores aborts and always drains the round.
    std::exception_ptr read_error;
    if (error.empty() && read) {
      try {
        read(slots_);
      } catch (...) {
        read_error = std::current_exception();
      }
    }
    {
      std::unique_lock lock(world_->mu);
      const uint64_t drained = drained_;
      if (--leaving_ == 0) {
        std::fill(slots_.begin(), slots_.end(), nullptr);
        ++drained_;
        world_->cv.notify_all();
      } else {
        world_->cv.wait(lock, [&] { return drained_ != drained; });
      }
    }
    if (!error.empty()) throw CheckpointError(ErrorKind::kComm, error);
    if (read_error) std::rethrow_exception(read_error);
  }

 private:
  // Called with the lock held by the last member to arrive.
  void CompleteRound(const Hook& complete) {
    arrived_ = 0;
    leaving_ = size();
    for (int world_rank : world_ranks_) world_->EndWait(world_rank);
    round_error_ = Mismatch(slots_);
    if (round_error_.empty() && complete) {
      try {
        complete(slots_);
      } catch (const std::exception& e) {
        round_error_ = e.what();
      }
    }
    ++round_;
    world_->cv.notify_all();
  }

  const std::shared_ptr<World> world_;
  const std::vector<int> world_ranks_;  // by rank in this group
  // Guarded by world_->mu.
  std::vector<Slot*> slots_;
  int arrived_ = 0;          // members in the current round's first phase
  int leaving_ = 0;          // members still reading the completed round
  uint64_t round_ = 0;       // rounds whose contributions are complete
  uint64_t drained_ = 0;     // rounds every member has finished reading
  std::string round_error_;  // why the last completed round failed, if it did
};

template <typename T>
T Combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kSum:
      break;
  }
  // Wraps on overflow instead of invoking undefined behaviour.
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

// Splits `slots` by color into new groups ordered by (key, rank); records the
// result in each slot. Runs under the lock when every member has arrived.
void AssignSplitGroups(const Group& parent, const std::vector<Slot*>& slots) {
  std::vector<int> order(slots.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(slots[a]->color, slots[a]->key) < std::pair(slots[b]->color, slots[b]->key);
  });
  for (size_t begin = 0; begin < order.size();) {
    const int color = slots[order[begin]]->color;
    size_t end = begin;
    std::vector<int> world_ranks;
    for (; end < order.size() && slots[order[end]]->color == color; ++end) {
      world_ranks.push_back(parent.world_rank(order[end]));
    }
    if (color >= 0) {
      auto group = std::make_shared<Group>(parent.world(), std::move(world_ranks));
      for (size_t i = begin; i < end; ++i) {
        slots[order[i]]->split_group = group;
        slots[order[i]]->split_rank = static_cast<int>(i - begin);
      }
    }
    begin = end;
  }
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int ranks_on_node() const override { return group_->world()->size(); }

  void Barrier() override {
    Slot slot{Op::kBarrier};
    group_->Run(rank_, &slot, nullptr, nullptr);
  }

  void Broadcast(std::string& bytes, int root) override {
    CheckRoot(root);
    Slot slot{Op::kBroadcast, root};
    if (rank_ == root) slot.bytes = &bytes;  // only the root's buffer is read
    group_->Run(rank_, &slot, nullptr, [&](const std::vector<Slot*>& slots) {
      if (rank_ != root) bytes = *slots[root]->bytes;
    });
  }

  void BroadcastBytes(std::span<std::byte> bytes, int root) override {
    CheckRoot(root);
    Slot slot{Op::kBroadcastBytes, root};
    slot.values = bytes.data();
    slot.count = bytes.size();  // a length that differs across ranks is a mismatch
    group_->Run(rank_, &slot, nullptr, [&](const std::vector<Slot*>& slots) {
      if (rank_ != root && !bytes.empty()) {
        std::memcpy(bytes.data(), slots[root]->values, bytes.size());
      }
    });
  }

  std::vector<std::string> Gather(const std::string& bytes, int root) override {
    CheckRoot(root);
    return Collect(Op::kGather, bytes, root);
  }

  std::vector<std::string> AllGather(const std::string& bytes) override {
    return Collect(Op::kAllGather, bytes, -1);
  }

  void AllReduce(std::span<int64_t> values, ReduceOp op) override {
    Reduce(Op::kAllReduce, values, op);
  }

  void AllReduceBytes(std::span<uint8_t> values, ReduceOp op) override {
    Reduce(Op::kAllReduceBytes, values, op);
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    Slot slot{Op::kSplit};
    slot.color = color < 0 ? -1 : color;
    slot.key = key;
    const Group& parent = *group_;
    group_->Run(
        rank_, &slot, [&](const std::vector<Slot*>& slots) { AssignSplitGroups(parent, slots); },
        nullptr);
    if (!slot.split_group) return nullptr;
    return std::make_unique<ThreadCommunicator>(std::move(slot.split_group), slot.split_rank);
  }

 private:
  // Gather (root >= 0) or AllGather (root < 0).
  std::vector<std::string> Collect(Op op, const std::string& bytes, int root) {
    Slot slot{op, root, &bytes};
    std::vector<std::string> out;
    group_->Run(rank_, &slot, nullptr, [&](const std::vector<Slot*>& slots) {
      if (root >= 0 && rank_ != root) return;
      out.reserve(slots.size());
      for (const Slot* s : slots) out.push_back(*s->bytes);
    });
    return out;
  }

  template <typename T>
  void Reduce(Op kind, std::span<T> values, ReduceOp op) {
    Slot slot{kind};
    slot.values = values.data();
    slot.count = values.size();
    slot.reduce = op;
    std::vector<T> result;
    group_->Run(rank_, &slot, nullptr, [&](const std::vector<Slot*>& slots) {
      const T* first = static_cast<const T*>(slots[0]->values);
      result.assign(first, first + values.size());
      for (size_t r = 1; r < slots.size(); ++r) {
        const T* other = static_cast<const T*>(slots[r]->values);
        for (size_t i = 0; i < result.size(); ++i) result[i] = Combine(result[i], other[i], op);
      }
    });
    // Only now may `values` change: every rank has finished reading it.
    std::copy(result.begin(), result.end(), values.begin());
  }

  const std::shared_ptr<Group> group_;
  const int rank_;
};

std::string ExceptionMessage(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

bool IsCommError(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const CheckpointError& e) {
    return e.kind() == ErrorKind::kComm;
  } catch (...) {
    return false;
  }
}

}  // namespace

namespace {

// A number from a /proc file (its first field), or nullopt.
std::optional<uint64_t> ProcNumber(const char* path) {
  std::ifstream in(path);
  uint64_t n = 0;
  if (in >> n) return n;
  return std::nullopt;
}

// The lines of /proc/self/maps (the process's memory mappings).
uint64_t MappingCount() {
  std::ifstream in("/proc/self/maps");
  return static_cast<uint64_t>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}

}  // namespace

void CheckThreadWorldFits(int world_size) {
  if (world_size < 1) {
    Fail(ErrorKind::kInvalidArgument, "world size must be at least 1, got {}", world_size);
  }
  if (world_size <= 1024) return;  // well inside every limit below
  // Each thread takes a task (threads-max, pid_max) and two mappings, its
  // stack and the guard page (max_map_count), and its stack's address space
  // (ulimit -v). A world past any of these fails only after thousands of
  // threads have started (seconds, and GBs of resident memory).
  struct Limit {
    uint64_t threads;
    std::string what;
  };
  std::vector<Limit> limits;
  if (auto n = ProcNumber("/proc/sys/kernel/threads-max")) limits.push_back({*n, "threads-max"});
  if (auto n = ProcNumber("/proc/sys/kernel/pid_max")) limits.push_back({*n, "pid_max"});
  if (auto n = ProcNumber("/proc/sys/vm/max_map_count")) {
    const uint64_t used = MappingCount();
    limits.push_back({*n > used ? (*n - used) / 2 : 0, "vm.max_map_count, two mappings a thread"});
  }
  rlimit as{};
  pthread_attr_t attr;
  size_t stack = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && stack > 0) {
    limits.push_back({as.rlim_cur / stack, fmt::format("ulimit -v {} KiB, {} KiB of stack a thread",
                                                       as.rlim_cur >> 10, stack >> 10)});
  }
  for (const Limit& limit : limits) {
    if (static_cast<uint64_t>(world_size) > limit.threads) {
      Fail(ErrorKind::kInvalidArgument,
           "a world of {} ranks runs one thread per rank, and this machine allows at most {} "
           "threads ({}): use fewer ranks, or --backend mpi",
           world_size, limit.threads, limit.what);
    }
  }
}

std::vector<RankOutcome> RunRanksCollect(int world_size,
                                         const std::function<void(Communicator&)>& fn) {
  CheckThreadWorldFits(world_size);  // before any thread, or per-rank state, is made
  std::vector<int> ranks(world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto world = std::make_shared<World>(world_size);
  auto root = std::make_shared<Group>(world, std::move(ranks));
  std::vector<RankOutcome> outcomes(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  auto run_rank = [&](int r) {
    outcomes[r].rank = r;
    try {
      ThreadCommunicator comm(root, r);
      fn(comm);
      world->Finish();
    } catch (...) {
      outcomes[r].error = std::current_exception();
      world->Abort(r, ExceptionMessage(outcomes[r].error));
    }
  };
  try {
    for (int r = 0; r < world_size; ++r) threads.emplace_back(run_rank, r);
  } catch (const std::exception& e) {  // could not start a thread: release the started ones
    const int started = static_cast<int>(threads.size());
    world->Abort(started, e.what());
    for (std::thread& t : threads) t.join();
    Fail(ErrorKind::kInvalidArgument,
         "a world of {} ranks runs one thread per rank, and this machine started only {} ({}): "
         "use fewer ranks, or --backend mpi",
         world_size, started, e.what());
  }
  for (std::thread& t : threads) t.join();
  return outcomes;
}

void RunRanks(int world_size, const std::function<void(Communicator&)>& fn) {
  const std::vector<RankOutcome> outcomes = RunRanksCollect(world_size, fn);
  const RankOutcome* chosen = nullptr;
  for (const RankOutcome& outcome : outcomes) {
    if (!outcome.error) continue;
    if (!IsCommError(outcome.error)) {
      chosen = &outcome;  // the lowest rank's own failure, not an induced kComm
      break;
    }
    if (chosen == nullptr) chosen = &outcome;
  }
  if (chosen != nullptr) std::rethrow_exception(chosen->error);
}

}  // namespace distckpt
