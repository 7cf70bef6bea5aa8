// Property 5: a resharded load reads exactly the bytes it needs. For random
// A -> B, an element-by-element oracle finds, for every request of every rank
// of B, the stored chunk holding each requested element. Then:
//  - PlanTensorLoad plans exactly those chunks with exactly those element
//    counts (the overlaps), and counts every requested element once;
//  - Load's LoadSummary: bytes_needed = the overlaps' bytes; with the default
//    verify policy bytes_read = bytes_needed (never more); with
//    VerifyPolicy::kAlways bytes_read = chunk_bytes = the touched chunks' sizes.
// The counterexample replays with `distckpt run FILE`, which prints the bytes
// read and needed; the failure message gives the oracle's numbers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/load.h"
#include "engine/load_plan.h"
#include "format/format.h"
#include "harness/expand/expand.h"
#include "mapping/dict_utils.h"
#include "property/generators.h"
#include "property/harness.h"
#include "property/oracle.h"
#include "property/steps.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

struct Overlaps {
  std::map<size_t, int64_t> elements;  // chunk index -> requested elements it holds
  int64_t needed = 0;                  // requested elements inside the stored shape
};

// The oracle: visits every requested element.
Overlaps CountOverlaps(const StoredTensor& stored, const ShardedTensor& request) {
  Overlaps out;
  ForEachPosition(request.GlobalBox(), request.flattened_range, [&](const Shape& pos) {
    if (IndexInShape(stored.global_shape, pos) < 0) return;  // padding beyond the stored shape
    ++out.needed;
    for (size_t c = 0; c < stored.chunks.size(); ++c) {
      const StoredChunk& chunk = stored.chunks[c];
      const int64_t at = IndexIn(chunk.box, pos);
      if (at >= 0 && (!chunk.flat || (at >= chunk.flat->start && at < chunk.flat->stop))) {
        ++out.elements[c];
      }
    }
  });
  return out;
}

struct RankBytes {
  uint64_t needed = 0;
  uint64_t touched = 0;  // sizes of the chunks read from
};

// Checks every plan of `rank`'s request against the oracle; sums its bytes.
// Every ShardedTensor of the request: "tensors", and the "fp8" section's
// tensors and scale_inv companions.
std::optional<std::string> CheckPlans(const CheckpointMetadata& md, const Node& request, int rank,
                                      RankBytes& bytes) {
  std::vector<ShardedTensor> requests;
  ForEachLeaf(request, [&](const NodePath&, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) requests.push_back(*t);
  });
  for (const ShardedTensor& want : requests) {
    if (want.flattened_range && want.flattened_range->size() == 0)
      continue;  // load_preprocess drops it
    const StoredTensor& stored = md.tensors.at(want.key);
    const Overlaps oracle = CountOverlaps(stored, want);
    const TensorPlan plan = PlanTensorLoad(stored, want);
    std::map<size_t, int64_t> planned;
    for (const ChunkPlan& c : plan.chunks) planned[c.chunk_index] += c.elements;
    if (planned != oracle.elements || plan.elements_needed != oracle.needed ||
        plan.elements_covered != oracle.needed) {
      auto text = [&](const std::map<size_t, int64_t>& counts) {
        std::string out;
        for (const auto& [c, n] : counts)
          out += fmt::format(" {}:{}", stored.chunks[c].box.ToString(), n);
        return out;
      };
      const std::string want_text = text(oracle.elements), got_text = text(planned);
      return fmt::format(
          "rank {} key '{}' request {}: planned chunk overlaps{} (needed {}, covered {}), "
          "oracle{} (needed {})",
          rank, want.key, want.GlobalBox().ToString(), got_text, plan.elements_needed,
          plan.elements_covered, want_text, oracle.needed);
    }
    for (const auto& [c, n] : oracle.elements) {
      bytes.needed += static_cast<uint64_t>(n) * DTypeSize(stored.dtype);
      bytes.touched += stored.chunks[c].length;
    }
  }
  return std::nullopt;
}

std::optional<std::string> RunBytes(const Scenario& s, const std::string& work) {
  const PairSpec& pair = s.pairs[0];
  const Topology a = Topology::Parse(pair.save);
  const Topology b = Topology::Parse(pair.load);
  const std::string dir = (fs::path(work) / "ckpt").string();
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  if (auto e = SaveScenario(s, pair.save, dir)) return *e;
  const CheckpointMetadata md = NativeFormat().OpenReader(Env::Default(), dir)->metadata();
  std::vector<RankBytes> oracle(b.world_size());
  for (int rank = 0; rank < b.world_size(); ++rank) {
    if (auto e = CheckPlans(md, BuildLoadRequest(s, &pair, a, b, rank), rank, oracle[rank]))
      return *e;
  }
  // kNever reads exactly the overlaps; kAlways every byte of the touched
  // chunks; the default (native v2) the touched checksum blocks: in between.
  for (VerifyPolicy verify :
       {VerifyPolicy::kNever, VerifyPolicy::kWhenWhole, VerifyPolicy::kAlways}) {
    std::vector<LoadSummary> got(b.world_size());
    if (auto e = OnThreads(b.world_size(), [&](Communicator& comm) {
          LoadOptions options;
          options.verify = verify;
          got[comm.rank()] =
              Load(BuildLoadRequest(s, &pair, a, b, comm.rank()), dir, comm, options).summary;
        })) {
      return *e;
    }
    const bool always = verify == VerifyPolicy::kAlways;
    const bool blocks = verify == VerifyPolicy::kWhenWhole;
    for (int rank = 0; rank < b.world_size(); ++rank) {
      const RankBytes& want = oracle[rank];
      const LoadSummary& sum = got[rank];
      const uint64_t read = always ? want.touched : want.needed;
      const bool read_ok = blocks ? sum.bytes_read >= want.needed && sum.bytes_read <= want.touched
                                  : sum.bytes_read == read;
      if (sum.bytes_needed != want.needed || !read_ok || sum.chunk_bytes != want.touched) {
        return fmt::format(
            "rank {} ({} verify): bytes needed {}, read {}, chunk bytes {}; the overlaps "
            "need {} bytes, reading {}, of chunks of {} bytes",
            rank, VerifyPolicyName(verify), sum.bytes_needed, sum.bytes_read, sum.chunk_bytes,
            want.needed,
            blocks ? fmt::format("{} to {}", want.needed, want.touched) : std::to_string(read),
            want.touched);
      }
    }
  }
  return std::nullopt;
}

TEST(BytesProperty, ReshardedLoadReadsExactlyTheOverlaps) {
  const std::string work = MakeWorkDir();
  GenLimits limits;
  limits.objects = false;  // object payloads are read whole: keep to tensor bytes
  CheckProperty({300,
                 {{"uneven", 0.05},
                  {"flattened", 0.10},
                  {"padded", 0.05},
                  {"world-size-changing", 0.30},
                  {"dtype-converting", 0.05}}},
                [&] {
                  const Scenario s = *GenReshardScenario(limits);
                  Tag(ReshardClasses(s));
                  CheckScenario(s, limits, [&](const Scenario& c) { return RunBytes(c, work); });
                });
  fs::remove_all(work);
}

}  // namespace
}  // namespace distckpt
