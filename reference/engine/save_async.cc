#include "engine/save_async.h"

#include <chrono>
#include <cstring>
#include <map>

#include "core/error.h"
#include "engine/save_steps.h"
#include "mapping/dict_utils.h"
#include "strategy/async_writer.h"
#include "strategy/staging.h"

namespace distckpt {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Copies every item this rank writes into one staging buffer and starts
// the writers on it.
std::shared_ptr<WriterJob> StageAndStartWriters(const PreparedSave& prepared, int rank,
                                                const SaveOptions& options, SaveSummary& summary) {
  struct Pending {
    WriteItem item;
    Tensor tensor;        // the caller's tensor (any device; undefined: no bytes)
    std::string payload;  // an object's serialized value
  };
  std::vector<Pending> pending;
  ForEachItemToWrite(
      prepared.sharded(), *prepared.format,
      [&](const ShardedTensor& t, const Tensor& data) {
        Pending& p = pending.emplace_back();
        p.item.key = t.key;
        p.item.dtype = t.dtype;
        p.item.global_shape = t.global_shape;
        p.item.box = t.GlobalBox();
        p.item.flat = t.flattened_range;
        p.tensor = data;
        ++summary.chunks_written;
      },
      [&](const ShardedObject& o, const std::string& payload) {
        Pending& p = pending.emplace_back();
        p.item.is_object = true;
        p.item.key = o.key;
        p.item.unique_key = o.UniqueKey();
        p.item.object_shape = o.global_shape;
        p.item.object_offset = o.global_offset;
        p.payload = payload;
      });
  size_t total = 0;
  for (Pending& p : pending) {
    p.item.offset = total;
    p.item.length = p.item.is_object     ? p.payload.size()
                    : p.tensor.defined() ? p.tensor.nbytes()
                                         : 0;
    total += p.item.length;
  }
  std::shared_ptr<StagingBuffer> staged = options.strategy.staging
                                              ? options.strategy.staging->Acquire(total)
                                              : StagingPool::Unpooled(total);
  // Device tensors' copies are queued on a side stream per device and run
  // while the host ones are copied; the save returns once all are done.
  std::map<int, std::unique_ptr<AsyncCopy>> copies;
  std::map<int, uint64_t> last_ticket;
  std::vector<WriteItem> items;
  items.reserve(pending.size());
  for (Pending& p : pending) {
    std::byte* dst = staged->data() + p.item.offset;
    if (p.item.length == 0) {
    } else if (p.item.is_object) {
      std::memcpy(dst, p.payload.data(), p.item.length);
    } else if (p.tensor.on_cuda()) {
      const int device = p.tensor.device().index;
      std::unique_ptr<AsyncCopy>& copy = copies[device];
      if (!copy) copy = std::make_unique<AsyncCopy>(p.tensor.device());
      last_ticket[device] = copy->QueueToHost(dst, p.tensor.raw_data(), p.item.length);
    } else {
      std::memcpy(dst, p.tensor.data(), p.item.length);
    }
    items.push_back(std::move(p.item));
  }
  for (auto& [device, copy] : copies) copy->Wait(last_ticket[device]);
  summary.bytes_staged = total;
  return std::make_shared<WriterJob>(*prepared.format, prepared.env, prepared.write_dir, rank,
                                     std::move(items), std::move(staged), options.strategy.writers);
}

}  // namespace

AsyncSave SaveAsync(const Node& state_dict, const std::string& dir, Communicator& comm,
                    const SaveOptions& options) {
  const Clock::time_point start = Clock::now();
  auto summary = std::make_shared<SaveSummary>();
  if (options.strategy.writers < 1) {
    Fail(ErrorKind::kInvalidArgument, "an async save needs at least one writer, got {}",
         options.strategy.writers);
  }
  PreparedSave prepared = PrepareSave(state_dict, dir, comm, options, *summary);
  std::shared_ptr<WriterJob> job;
  AgreeOnOutcome(comm,
                 [&] { job = StageAndStartWriters(prepared, comm.rank(), options, *summary); });
  // Staged: let go of the caller's tensors and objects' values now. The tree
  // of shard metadata goes with the request (freed after finalize, off the
  // blocking path).
  ForEachLeaf(prepared.mutable_sharded(), [](const NodePath&, Node& leaf) {
    if (ShardedTensor* t = leaf.get_if<ShardedTensor>()) t->data = Tensor();
    if (ShardedObject* o = leaf.get_if<ShardedObject>()) *o = o->WithoutData();
  });
  summary->blocking_seconds = SecondsSince(start);

  AsyncRequest request(job);
  request.AddFinalize([job, prepared = std::move(prepared), dir, &comm, options, summary, start] {
    try {
      CheckpointMetadata local;
      AgreeOnOutcome(comm, [&] { local = job->Result(); });  // every writer has stopped
      CommitSave(std::move(local), prepared, dir, comm, options);
    } catch (const CheckpointError&) {
      RemoveFailedSave(prepared, dir, comm);
      throw;
    }
    summary->bytes_written = job->bytes_written();
    summary->seconds = SecondsSince(start);
  });
  return {std::move(request), summary};
}

}  // namespace distckpt
