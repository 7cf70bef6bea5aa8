#include "strategy/async_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <queue>

#include "core/error.h"

namespace distckpt {

struct WriterJob::State {
  const Format* format;
  Env* env;
  std::string write_dir;
  int rank;
  std::vector<WriteItem> items;
  std::shared_ptr<StagingBuffer> staged;
  std::vector<std::vector<size_t>> buckets;  // one per writer

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  int running = 0;
  std::vector<size_t> written;  // items written, per writer
  std::vector<bool> finished;
  std::vector<CheckpointMetadata> results;
  std::optional<CheckpointError> failure;  // the first writer failure
  uint64_t bytes = 0;
};

std::vector<std::vector<size_t>> SplitBySizeAndType(const std::vector<WriteItem>& items, int bins) {
  bins = std::max(bins, 1);
  std::vector<std::vector<size_t>> buckets(bins);
  if (bins == 1) {
    buckets[0].resize(items.size());
    std::iota(buckets[0].begin(), buckets[0].end(), size_t{0});
    return buckets;
  }
  std::vector<size_t> tensors;
  size_t objects = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].is_object)
      buckets[objects++ % bins].push_back(i);
    else
      tensors.push_back(i);
  }
  std::stable_sort(tensors.begin(), tensors.end(),
                   [&](size_t a, size_t b) { return items[a].length > items[b].length; });
  using Bin = std::pair<uint64_t, int>;  // (tensor bytes, index): a min-heap
  std::priority_queue<Bin, std::vector<Bin>, std::greater<Bin>> heap;
  for (int b = 0; b < bins; ++b) heap.emplace(0, b);
  for (size_t i : tensors) {
    auto [bytes, b] = heap.top();
    heap.pop();
    buckets[b].push_back(i);
    heap.emplace(bytes + items[i].length, b);
  }
  return buckets;
}

WriterJob::WriterJob(const Format& format, Env* env, std::string write_dir, int rank,
                     std::vector<WriteItem> items, std::shared_ptr<StagingBuffer> staged,
                     int writers)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.format = &format;
  s.env = env;
  s.write_dir = std::move(write_dir);
  s.rank = rank;
  s.items = std::move(items);
  s.staged = std::move(staged);
  // Empty buckets write no file (Megatron); an empty job keeps one writer
  // so that its metadata still names the format's writer.
  for (std::vector<size_t>& bucket : SplitBySizeAndType(s.items, writers)) {
    if (!bucket.empty()) s.buckets.push_back(std::move(bucket));
  }
  if (s.buckets.empty()) s.buckets.emplace_back();
  const int n = static_cast<int>(s.buckets.size());
  s.written.assign(n, 0);
  s.finished.assign(n, false);
  s.results.resize(n);
  s.running = n;
  for (int w = 0; w < n; ++w) threads_.emplace_back(&WriterJob::Run, state_, w);
}

WriterJob::~WriterJob() {
  std::lock_guard lock(state_->mu);
  for (size_t w = 0; w < threads_.size(); ++w) {
    if (state_->finished[w]) {
      threads_[w].join();  // already past its last lock: returns at once
    } else {
      threads_[w].detach();  // hung: it owns a reference to the state
    }
  }
}

bool WriterJob::Done() const {
  std::lock_guard lock(state_->mu);
  return state_->running == 0;
}

bool WriterJob::WaitUntil(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_until(lock, deadline, [&] { return state_->running == 0; });
}

std::string WriterJob::Pending() const {
  std::lock_guard lock(state_->mu);
  std::string out;
  for (size_t w = 0; w < state_->buckets.size(); ++w) {
    if (state_->finished[w]) continue;
    // Every item handed to the writer: what is left is its last writes and fsync.
    const bool syncing = state_->written[w] == state_->buckets[w].size();
    out += fmt::format("{}writer {} of rank {}: {} of {} items written to {}{}",
                       out.empty() ? "" : "; ", w, state_->rank, state_->written[w],
                       state_->buckets[w].size(), state_->write_dir,
                       syncing ? ", flushing and syncing" : "");
  }
  return out;
}

CheckpointMetadata WriterJob::Result() const {
  std::lock_guard lock(state_->mu);
  if (state_->running != 0) {
    Fail(ErrorKind::kInvalidArgument, "async writers of rank {} have not finished", state_->rank);
  }
  if (state_->failure) throw *state_->failure;
  CheckpointMetadata merged = state_->results[0];
  for (size_t w = 1; w < state_->results.size(); ++w) merged.MergeFrom(state_->results[w]);
  return merged;
}

uint64_t WriterJob::bytes_written() const {
  std::lock_guard lock(state_->mu);
  return state_->bytes;
}

void WriterJob::Run(const std::shared_ptr<State>& state, int w) {
  State& s = *state;
  CheckpointMetadata result;
  std::optional<CheckpointError> failure;
  uint64_t bytes = 0;
  try {
    std::unique_ptr<CheckpointWriter> writer =
        s.format->NewStreamWriter(s.env, s.write_dir, s.rank, w);
    for (size_t i : s.buckets[w]) {
      const WriteItem& item = s.items[i];
      std::span<const std::byte> data(s.staged->data() + item.offset, item.length);
      if (item.is_object) {
        writer->WriteObject(item.key, item.unique_key, item.object_shape, item.object_offset, data);
      } else {
        writer->WriteTensorChunk(item.key, item.dtype, item.global_shape, item.box, item.flat,
                                 data);
      }
      std::lock_guard lock(s.mu);
      ++s.written[w];
    }
    result = writer->Finish();  // fsyncs
    bytes = writer->bytes_written();
  } catch (const CheckpointError& e) {
    failure = CheckpointError(e.kind(),
                              fmt::format("async writer {} of rank {}: {}", w, s.rank, e.what()));
  } catch (const std::exception& e) {
    failure = CheckpointError(ErrorKind::kIo,
                              fmt::format("async writer {} of rank {}: {}", w, s.rank, e.what()));
  }
  std::lock_guard lock(s.mu);
  s.results[w] = std::move(result);
  if (failure && !s.failure) s.failure = std::move(failure);
  s.bytes += bytes;
  s.finished[w] = true;
  --s.running;
  s.cv.notify_all();
}

}  // namespace distckpt
