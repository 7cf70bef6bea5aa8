// Background writers of an async save (docs/megatron-semantics.md §4.4-§4.5,
// Megatron's write_preloaded_data_multiproc / FileSystemWriterAsync, with
// threads for processes): one rank's staged items are split into buckets,
// and each non-empty bucket is written by its own thread through its own
// CheckpointWriter (its own data file: Format::NewStreamWriter), then
// fsync'd by the writer's Finish.
//
// A WriterJob never blocks its owner: Done / WaitUntil poll, Result reports.
// A writer that fails records its error (naming the rank, the writer and,
// through Env's message, the file); a writer that hangs is reported by
// Pending after a wait times out. Destroying a job joins finished threads
// and detaches unfinished ones, which keep the staged bytes alive until
// they end (the Env they write through must outlive them).
//
// Thread-safety: a WriterJob is used by one thread (its owner); its writer
// threads share only its internal state.
#ifndef DISTCKPT_STRATEGY_ASYNC_WRITER_H_
#define DISTCKPT_STRATEGY_ASYNC_WRITER_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "format/format.h"
#include "strategy/async_queue.h"
#include "strategy/staging.h"

namespace distckpt {

// One tensor chunk or object payload, staged at [offset, offset + length).
struct WriteItem {
  bool is_object = false;
  std::string key;
  // Tensor chunk.
  DType dtype = DType::kF32;
  Shape global_shape;
  Box box;
  std::optional<FlatRange> flat;
  // Object.
  std::string unique_key;
  Shape object_shape, object_offset;
  size_t offset = 0, length = 0;
};

// Megatron's _split_by_size_and_type: `bins` buckets (item indices);
// objects round-robin; tensor chunks by size, largest first (stable), each
// to the bucket with the fewest tensor bytes (ties: lowest index).
std::vector<std::vector<size_t>> SplitBySizeAndType(const std::vector<WriteItem>& items, int bins);

class WriterJob : public AsyncWork {
 public:
  // Starts up to `writers` threads (at least one, for an empty job too).
  WriterJob(const Format& format, Env* env, std::string write_dir, int rank,
            std::vector<WriteItem> items, std::shared_ptr<StagingBuffer> staged, int writers);
  ~WriterJob() override;
  WriterJob(const WriterJob&) = delete;
  WriterJob& operator=(const WriterJob&) = delete;

  bool Done() const;
  // Waits until every writer finished or `deadline`; returns Done().
  bool WaitUntil(std::chrono::steady_clock::time_point deadline) override;
  // What is still running: "writer 1 of rank 3: 2 of 5 items written to DIR"
  // (", flushing and syncing" once every item is handed to its writer).
  std::string Pending() const override;
  // After Done(): this rank's metadata (every writer's, merged), or throws
  // the first writer failure.
  CheckpointMetadata Result() const;
  int writers() const { return static_cast<int>(threads_.size()); }
  uint64_t bytes_written() const;

 private:
  struct State;
  static void Run(const std::shared_ptr<State>& state, int writer);  // a writer thread

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_ASYNC_WRITER_H_
