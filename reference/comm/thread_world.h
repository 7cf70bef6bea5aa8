// In-process ranks: RunRanks(n, fn) runs fn(comm) on n threads, one
// Communicator each, and returns when all have finished.
//
// If any rank throws, the world aborts (blocked ranks throw kComm) and
// RunRanks rethrows the first rank's original exception after joining all
// threads; RankErrors() gives every rank's message for reports.
//
// Thread-safety: RunRanks may be called concurrently for independent worlds.
#ifndef DISTCKPT_COMM_THREAD_WORLD_H_
#define DISTCKPT_COMM_THREAD_WORLD_H_

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace distckpt {

struct RankOutcome {
  int rank = 0;
  std::exception_ptr error;  // null on success
};

// Refuses (kInvalidArgument, naming the limit) a world this process cannot
// start a thread per rank for: threads-max, pid_max, vm.max_map_count, the
// address-space limit over the default stack size. RunRanks checks it
// first; a caller that keeps per-rank state checks it before making that.
void CheckThreadWorldFits(int world_size);
// Runs and returns every rank's outcome without rethrowing.
std::vector<RankOutcome> RunRanksCollect(int world_size,
                                         const std::function<void(Communicator&)>& fn);
// Runs and rethrows the lowest failing rank's exception (if any).
void RunRanks(int world_size, const std::function<void(Communicator&)>& fn);

}  // namespace distckpt

#endif  // DISTCKPT_COMM_THREAD_WORLD_H_
