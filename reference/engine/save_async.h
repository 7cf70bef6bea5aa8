// SaveAsync: the blocking part of an asynchronous save (docs/megatron-semantics.md
// §4.4, Megatron's save(..., async_sharded_save=True) -> AsyncRequest).
//
// Collective like Save up to the writing: preprocessing, checks, global
// validation, the fully parallel distribution and the directory. Then every
// byte this rank writes is copied into one host staging buffer (so the
// caller may change its state as soon as SaveAsync returns, and what is
// written is what the state held at the call), and `options.strategy.writers`
// background threads start writing it, one data file each, and fsync.
//
// Schedule the returned request on an AsyncCallsQueue over the same
// communicator; its finalize (collective, run by MaybeFinalize once every
// rank's writers are done) gathers what every rank wrote and commits the
// metadata last. If any writer on any rank failed, finalize throws on every
// rank, naming the rank, writer and file, and nothing is committed: a
// previous checkpoint is untouched. The checkpoint equals a synchronous
// Save's in global space (data files may be split differently).
//
// Thread-safety: one call per rank; `comm`, `options.env` and the strategy's
// group, cache and staging pool must outlive the request.
#ifndef DISTCKPT_ENGINE_SAVE_ASYNC_H_
#define DISTCKPT_ENGINE_SAVE_ASYNC_H_

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "engine/options.h"
#include "mapping/state_dict.h"
#include "strategy/async_queue.h"

namespace distckpt {

struct AsyncSave {
  AsyncRequest request;
  // Now: blocking_seconds, bytes_staged, warnings. After finalize:
  // bytes_written, chunks_written, seconds (from the call to the commit).
  std::shared_ptr<SaveSummary> summary;
};

AsyncSave SaveAsync(const Node& state_dict, const std::string& dir, Communicator& comm,
                    const SaveOptions& options = {});

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_SAVE_ASYNC_H_
