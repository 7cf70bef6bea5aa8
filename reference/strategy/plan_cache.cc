#include "strategy/plan_cache.h"

#include <functional>
#include <span>
#include <string>

#include "core/error.h"
#include "io/checksum.h"
#include "mapping/validation.h"
#include "wire/messages.h"

namespace distckpt {
namespace {

// Calls fn on every checksum slot of `md` in layout order.
void ForEachChecksum(CheckpointMetadata& md,
                     const std::function<void(std::optional<uint64_t>&)>& fn) {
  for (auto& [key, tensor] : md.tensors) {
    for (StoredChunk& chunk : tensor.chunks) {
      // Writers produce the current versions: one checksum per chunk (DCP),
      // or, native, the checksum of the block checksums stored in the data file.
      fn(chunk.block_size == 0 ? chunk.checksum : chunk.sums_checksum);
    }
  }
  for (auto& [unique_key, object] : md.objects) fn(object.checksum);
}

}  // namespace

uint64_t PlanFingerprint(const Node& sharded, std::string_view context) {
  std::string text = EncodeShardedMetadata(CollectLocalMetadata(sharded));
  text += '|';
  text += context;
  return Checksum(std::as_bytes(std::span(text)));
}

bool PlanReusable(const PlanCache& cache, uint64_t fingerprint, Communicator& comm) {
  const bool mine = cache.filled && cache.fingerprint == fingerprint;
  return comm.AllReduceOne(mine ? 1 : 0, ReduceOp::kMin) == 1;
}

std::optional<std::vector<uint64_t>> ChecksumsIfSameLayout(const CheckpointMetadata& local,
                                                           const CheckpointMetadata& cached) {
  CheckpointMetadata a = local, b = cached;
  std::vector<uint64_t> checksums;
  bool complete = true;
  ForEachChecksum(a, [&](std::optional<uint64_t>& c) {
    complete &= c.has_value();
    checksums.push_back(c.value_or(0));
    c.reset();
  });
  ForEachChecksum(b, [](std::optional<uint64_t>& c) { c.reset(); });
  if (!complete || !(a == b)) return std::nullopt;
  return checksums;
}

CheckpointMetadata WithChecksums(CheckpointMetadata cached,
                                 const std::vector<uint64_t>& checksums) {
  size_t i = 0;
  ForEachChecksum(cached, [&](std::optional<uint64_t>& c) {
    if (i < checksums.size()) c = checksums[i];
    ++i;
  });
  if (i != checksums.size()) {
    Fail(ErrorKind::kCorruption, "reused save plan: {} checksums for {} stored items",
         checksums.size(), i);
  }
  return cached;
}

}  // namespace distckpt
