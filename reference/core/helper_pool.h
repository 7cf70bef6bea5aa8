// HelperPool: a process-wide set of idle threads that join a caller's
// parallel loop, so a short parallel step (one load's readers) starts no
// thread. The threads start on first use and live until the process ends.
//
// RunWithHelpers(helpers, work) calls work(0) on the calling thread and
// work(1), ..., work(helpers) on pool threads that are idle, and returns
// once every call that started has returned. A helper call the pool has not
// started by the time work(0) returns is not made at all, so `work` must
// share its items among whichever calls run (e.g. an atomic next index) and
// must not wait for another call. An exception thrown by work(0) passes
// through (after the helpers that started have returned); `work` must not
// let one escape from a helper call (std::terminate).
//
// Thread-safety: RunWithHelpers may be called from any number of threads at
// once (they share the pool; a busy pool only means fewer helpers).
#ifndef DISTCKPT_CORE_HELPER_POOL_H_
#define DISTCKPT_CORE_HELPER_POOL_H_

#include <cstddef>
#include <functional>

namespace distckpt {

// The hardware threads, at least 1: std::thread::hardware_concurrency() read
// once per process (glibc reads /sys on every call, ~15 us: a cost per save
// and per load of small tensors).
int HardwareThreads();

// The pool's threads: one fewer than the hardware threads, at least one.
int HelperPoolSize();

void RunWithHelpers(int helpers, const std::function<void(size_t call)>& work);

}  // namespace distckpt

#endif  // DISTCKPT_CORE_HELPER_POOL_H_
