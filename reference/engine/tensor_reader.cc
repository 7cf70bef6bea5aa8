#include "engine/tensor_reader.h"

#include <vector>

namespace distckpt {

PlanBytes ExecuteTensorPlan(CheckpointReader& reader, const StoredTensor& stored,
                            const TensorPlan& plan, Tensor& dst, VerifyPolicy policy) {
  const size_t src_size = DTypeSize(stored.dtype);
  const size_t dst_size = DTypeSize(dst.dtype());
  const bool same_dtype = stored.dtype == dst.dtype();
  PlanBytes bytes;
  std::vector<ReadRun> reads;
  std::vector<std::byte> staging;
  for (const ChunkPlan& cp : plan.chunks) {
    const StoredChunk& chunk = stored.chunks[cp.chunk_index];
    reads.clear();
    reads.reserve(cp.runs.size());
    if (same_dtype) {
      for (const CopyRun& run : cp.runs) {
        reads.push_back({static_cast<uint64_t>(run.a_index) * src_size,
                         static_cast<uint64_t>(run.count) * src_size,
                         dst.data() + static_cast<size_t>(run.b_index) * dst_size});
      }
    } else {
      staging.resize(static_cast<size_t>(cp.elements) * src_size);
      std::byte* cursor = staging.data();
      for (const CopyRun& run : cp.runs) {
        uint64_t length = static_cast<uint64_t>(run.count) * src_size;
        reads.push_back({static_cast<uint64_t>(run.a_index) * src_size, length, cursor});
        cursor += length;
      }
    }
    for (const ReadRun& r : reads) bytes.needed += r.length;
    bytes.chunk_bytes += chunk.length;
    reader.ReadChunk(stored, chunk, reads, policy);
    if (!same_dtype) {
      const std::byte* cursor = staging.data();
      for (const CopyRun& run : cp.runs) {
        ConvertElements(cursor, stored.dtype,
                        dst.data() + static_cast<size_t>(run.b_index) * dst_size, dst.dtype(),
                        static_cast<size_t>(run.count));
        cursor += static_cast<size_t>(run.count) * src_size;
      }
    }
  }
  return bytes;
}

}  // namespace distckpt
