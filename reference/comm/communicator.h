// Communicator: the collectives distckpt needs, over ranks that are threads
// of one process (ThreadWorld, for fast tests) or Open MPI processes
// (MpiCommunicator). Nothing above comm/ knows which backend runs the ranks.
//
// Every collective must be called by every rank of the communicator in the
// same order (empty payloads included). Payloads are byte strings.
//
// Failure contract: when a rank of a ThreadWorld fails (its rank function
// throws), the world is aborted and every other rank blocked in, or later
// entering, a collective throws CheckpointError(kComm) "rank R aborted: ...".
// Under MPI a failing process aborts the job (MPI_Abort) only as a last
// resort; library code agrees on verdicts with AgreeOnOutcome first.
//
// Thread-safety: a Communicator object is used by its own rank only.
#ifndef DISTCKPT_COMM_COMMUNICATOR_H_
#define DISTCKPT_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace distckpt {

enum class ReduceOp { kMin, kMax, kSum };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How many ranks of the whole job (not only of this communicator) share
  // this rank's machine and its CPUs: work that spreads over the hardware
  // threads (a load's readers) divides them among these ranks. ThreadWorld:
  // every rank of the world (threads of one process); Open MPI: the ranks
  // mpirun placed on this node (OMPI_COMM_WORLD_LOCAL_SIZE), 1 otherwise.
  virtual int ranks_on_node() const { return 1; }

  virtual void Barrier() = 0;
  // Root's `bytes` replaces everyone's.
  virtual void Broadcast(std::string& bytes, int root) = 0;
  // Root's `bytes` overwrite everyone's, in place: every rank passes a span of
  // the same length (the root's is only read). Moves a tensor's bytes without
  // a staging copy on either side. Host memory, or CUDA device memory where
  // device_memory() says so (each rank may pass either).
  virtual void BroadcastBytes(std::span<std::byte> bytes, int root) = 0;
  // Whether BroadcastBytes takes CUDA device memory (NCCL); otherwise callers
  // stage device bytes through host memory.
  virtual bool device_memory() const { return false; }
  // Root receives every rank's bytes in rank order; others get an empty vector.
  virtual std::vector<std::string> Gather(const std::string& bytes, int root) = 0;
  virtual std::vector<std::string> AllGather(const std::string& bytes) = 0;
  // Element-wise reduction over ranks, in place.
  virtual void AllReduce(std::span<int64_t> values, ReduceOp op) = 0;
  // Element-wise reduction of byte arrays (unsigned, per byte), in place.
  virtual void AllReduceBytes(std::span<uint8_t> values, ReduceOp op) = 0;
  // Collective over this communicator: ranks passing the same color form a new
  // communicator, ordered by (key, rank). color < 0 returns nullptr.
  virtual std::unique_ptr<Communicator> Split(int color, int key) = 0;

  // Convenience: the sub-group of `ranks` (every rank of this communicator
  // calls it with the same list; ranks outside get nullptr).
  std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks);
  int64_t AllReduceOne(int64_t value, ReduceOp op);

 protected:
  // Throws CheckpointError(kInvalidArgument) unless 0 <= root < size().
  void CheckRoot(int root) const;
};

// Runs `fn` on this rank and agrees on the outcome: if it threw on any rank,
// every rank throws a CheckpointError of the first failing rank's kind whose
// message names each failing rank and its message ("rank 2: ...").
// `fn` must not issue collectives on `comm`.
void AgreeOnOutcome(Communicator& comm, const std::function<void()>& fn);

// This rank's share of its machine's hardware threads: hardware threads /
// comm.ranks_on_node(), at least one (8 ranks on 2 cores get one each).
int ThreadsPerRank(const Communicator& comm);

}  // namespace distckpt

#endif  // DISTCKPT_COMM_COMMUNICATOR_H_
