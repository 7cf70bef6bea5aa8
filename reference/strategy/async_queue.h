// Asynchronous calls and their collective finalization (docs/megatron-semantics.md
// §4.4, Megatron's AsyncRequest / AsyncCallsQueue).
//
// An AsyncRequest is background work already running on this rank (an
// AsyncWork, e.g. a WriterJob) plus finalize functions that run, in order,
// on every rank once the work is done on every rank. Finalize functions are
// collective and must throw on every rank or on none (use AgreeOnOutcome).
//
// An AsyncCallsQueue schedules requests and finalizes them oldest first:
// MaybeFinalize(false) finalizes the requests whose work is done everywhere
// (one all-reduce per request checked) and returns; MaybeFinalize(true)
// waits for each, up to the queue's timeout per request, so a writer that
// hangs becomes an error on every rank ("... did not finish within 2.0 s:
// writer 1 of rank 3: 2 of 5 items written to ...") instead of a hang. A
// request whose finalization fails is dropped and the error thrown on every
// rank. Ranks must schedule the same requests in the same order; a mismatch
// is "Unmatched async calls ...".
//
// Destructors never issue collectives: a queue destroyed with requests
// pending abandons them (nothing is committed; their writer threads finish
// in the background). Close() finalizes them first.
//
// Thread-safety: a queue belongs to its rank's thread; collective calls
// follow the Communicator rules.
#ifndef DISTCKPT_STRATEGY_ASYNC_QUEUE_H_
#define DISTCKPT_STRATEGY_ASYNC_QUEUE_H_

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace distckpt {

class AsyncWork {
 public:
  virtual ~AsyncWork() = default;
  // Waits until the work finished or `deadline`; returns whether it finished.
  virtual bool WaitUntil(std::chrono::steady_clock::time_point deadline) = 0;
  // What is still running, for timeout messages.
  virtual std::string Pending() const = 0;
};

class AsyncRequest {
 public:
  using FinalizeFn = std::function<void()>;

  explicit AsyncRequest(std::shared_ptr<AsyncWork> work) : work_(std::move(work)) {}

  // Appends a finalize function; kInvalidArgument "Cannot add finalization
  // functions to a frozen AsyncRequest" once frozen (scheduled).
  void AddFinalize(FinalizeFn fn);
  void Freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }

  AsyncWork& work() const { return *work_; }
  const std::vector<FinalizeFn>& finalize_fns() const { return finalize_; }

 private:
  std::shared_ptr<AsyncWork> work_;
  std::vector<FinalizeFn> finalize_;
  bool frozen_ = false;
};

class AsyncCallsQueue {
 public:
  explicit AsyncCallsQueue(Communicator& comm,
                           std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~AsyncCallsQueue() = default;  // abandons pending requests; no collectives
  AsyncCallsQueue(const AsyncCallsQueue&) = delete;
  AsyncCallsQueue& operator=(const AsyncCallsQueue&) = delete;

  // Freezes and queues `request`; returns its call index (1, 2, ...).
  int Schedule(AsyncRequest request);
  // Collective. Finalizes pending requests oldest first (see above); returns
  // the call indices finalized.
  std::vector<int> MaybeFinalize(bool blocking);
  // Collective unless `abort`: finalizes everything pending (blocking), or
  // drops it without a collective.
  void Close(bool abort = false);
  size_t pending() const { return queue_.size(); }

 private:
  struct Call {
    int index;
    AsyncRequest request;
  };
  Communicator& comm_;
  std::chrono::milliseconds timeout_;
  std::deque<Call> queue_;
  int next_index_ = 1;
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_ASYNC_QUEUE_H_
