#include "strategy/async_queue.h"

#include "core/error.h"

namespace distckpt {

void AsyncRequest::AddFinalize(FinalizeFn fn) {
  if (frozen_)
    Fail(ErrorKind::kInvalidArgument, "Cannot add finalization functions to a frozen AsyncRequest");
  finalize_.push_back(std::move(fn));
}

AsyncCallsQueue::AsyncCallsQueue(Communicator& comm, std::chrono::milliseconds timeout)
    : comm_(comm), timeout_(timeout) {}

int AsyncCallsQueue::Schedule(AsyncRequest request) {
  request.Freeze();
  queue_.push_back({next_index_, std::move(request)});
  return next_index_++;
}

std::vector<int> AsyncCallsQueue::MaybeFinalize(bool blocking) {
  std::vector<int> finalized;
  while (!queue_.empty()) {
    const Call& oldest = queue_.front();
    const auto deadline =
        std::chrono::steady_clock::now() + (blocking ? timeout_ : std::chrono::milliseconds(0));
    const bool done = oldest.request.work().WaitUntil(deadline);
    // One all-reduce: is it done everywhere, and is it the same call everywhere?
    int64_t agree[3] = {done ? 1 : 0, oldest.index, -oldest.index};
    comm_.AllReduce(agree, ReduceOp::kMin);
    if (agree[1] != -agree[2]) {
      Fail(
          ErrorKind::kComm,
          "Unmatched async calls: ranks are finalizing calls {} to {}. That probably means not all "
          "ranks are participating in async finalization",
          agree[1], -agree[2]);
    }
    if (agree[0] == 0 && !blocking) break;
    Call call = std::move(queue_.front());
    queue_.pop_front();
    if (agree[0] == 0) {  // blocking, and the work of some rank timed out
      AgreeOnOutcome(comm_, [&] {
        if (done) return;
        Fail(ErrorKind::kIo, "async call {} did not finish within {:.1f} s: {}", call.index,
             std::chrono::duration<double>(timeout_).count(), call.request.work().Pending());
      });
    }
    for (const AsyncRequest::FinalizeFn& fn : call.request.finalize_fns()) fn();
    finalized.push_back(call.index);
  }
  return finalized;
}

void AsyncCallsQueue::Close(bool abort) {
  if (abort) {
    queue_.clear();
    return;
  }
  MaybeFinalize(true);
}

}  // namespace distckpt
