// Executes a TensorPlan: reads the planned byte runs of stored chunks into a
// destination buffer, converting dtype when the destination's differs.
//
// Same dtype: bytes go straight from pread into the destination. Otherwise
// each stored chunk's runs are streamed (CheckpointReader::StreamChunk) in
// pieces of about kConvertPieceBytes, each converted into the destination
// while it is in the cache: a load holds one piece per reading thread beyond
// its destinations (formats that verify whole chunks only: the chunk's
// overlap).
//
// Thread-safety: concurrent calls are safe for distinct destinations.
#ifndef DISTCKPT_ENGINE_TENSOR_READER_H_
#define DISTCKPT_ENGINE_TENSOR_READER_H_

#include <vector>

#include "core/tensor.h"
#include "engine/load_plan.h"
#include "format/format.h"

namespace distckpt {

inline constexpr uint64_t kConvertPieceBytes = 256 << 10;

struct PlanBytes {
  uint64_t needed = 0;       // stored bytes the plan reads
  uint64_t chunk_bytes = 0;  // total size of the stored chunks it touches
};

PlanBytes ExecuteTensorPlan(CheckpointReader& reader, const StoredTensor& stored,
                            const TensorPlan& plan, Tensor& dst, VerifyPolicy policy);

// ExecuteTensorPlan for several tensors: same-dtype reads are queued and
// issued together by Flush (CheckpointReader::ReadChunks, which may merge
// chunks lying back to back in a file into one system call); converting
// plans are streamed at once. Each destination must stay alive, and its
// bytes unread, until Flush returns.
//
// Thread-safety: one batch per thread.
class PlanReads {
 public:
  PlanReads(CheckpointReader& reader, VerifyPolicy policy) : reader_(reader), policy_(policy) {}

  PlanBytes Add(const StoredTensor& stored, const TensorPlan& plan, Tensor& dst);
  void Flush();

 private:
  struct Queued {
    const StoredTensor* tensor;
    const StoredChunk* chunk;
    size_t first_run, runs;  // into runs_
  };

  CheckpointReader& reader_;
  const VerifyPolicy policy_;
  std::vector<ReadRun> runs_;
  std::vector<Queued> queued_;
};

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_TENSOR_READER_H_
