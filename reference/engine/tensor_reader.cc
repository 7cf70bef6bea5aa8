#include "engine/tensor_reader.h"

#include <vector>

namespace distckpt {

PlanBytes ExecuteTensorPlan(CheckpointReader& reader, const StoredTensor& stored,
                            const TensorPlan& plan, Tensor& dst, VerifyPolicy policy) {
  PlanReads reads(reader, policy);
  PlanBytes bytes = reads.Add(stored, plan, dst);
  reads.Flush();
  return bytes;
}

PlanBytes PlanReads::Add(const StoredTensor& stored, const TensorPlan& plan, Tensor& dst) {
  const size_t src_size = DTypeSize(stored.dtype);
  const size_t dst_size = DTypeSize(dst.dtype());
  const bool same_dtype = stored.dtype == dst.dtype();
  PlanBytes bytes;
  std::vector<ReadRun> reads;
  for (const ChunkPlan& cp : plan.chunks) {
    const StoredChunk& chunk = stored.chunks[cp.chunk_index];
    bytes.chunk_bytes += chunk.length;
    if (same_dtype) {
      queued_.push_back({&stored, &chunk, runs_.size(), cp.runs.size()});
      for (const CopyRun& run : cp.runs) {
        runs_.push_back({static_cast<uint64_t>(run.a_index) * src_size,
                         static_cast<uint64_t>(run.count) * src_size,
                         dst.data() + static_cast<size_t>(run.b_index) * dst_size});
        bytes.needed += runs_.back().length;
      }
      continue;
    }
    reads.clear();
    reads.reserve(cp.runs.size());
    for (const CopyRun& run : cp.runs) {
      reads.push_back({static_cast<uint64_t>(run.a_index) * src_size,
                       static_cast<uint64_t>(run.count) * src_size, nullptr});
      bytes.needed += reads.back().length;
    }
    // Pieces come in the order of the runs, each inside one run, whole elements.
    size_t k = 0;
    reader_.StreamChunk(stored, chunk, reads, policy_, kConvertPieceBytes,
                        [&](uint64_t offset, std::span<const std::byte> piece) {
                          while (reads[k].offset_in_chunk + reads[k].length <= offset) ++k;
                          const size_t first = static_cast<size_t>(cp.runs[k].b_index) +
                                               (offset - reads[k].offset_in_chunk) / src_size;
                          ConvertElements(piece.data(), stored.dtype, dst.data() + first * dst_size,
                                          dst.dtype(), piece.size() / src_size);
                        });
  }
  return bytes;
}

void PlanReads::Flush() {
  std::vector<ChunkRead> reads;
  reads.reserve(queued_.size());
  for (const Queued& q : queued_) {
    reads.push_back({q.tensor, q.chunk, std::span(runs_).subspan(q.first_run, q.runs)});
  }
  reader_.ReadChunks(reads, policy_);
  queued_.clear();
  runs_.clear();
}

}  // namespace distckpt
