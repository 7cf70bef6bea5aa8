// Property 5: a resharded load reads exactly the bytes it needs. For random
// A -> B, an element-by-element oracle finds, for every request of every rank
// of B, the stored chunk holding each requested element. Then:
//  - PlanTensorLoad plans exactly those chunks with exactly those element
//    counts (the overlaps), and counts every requested element once;
//  - Load's LoadSummary: bytes_needed = the overlaps' bytes; with
//    VerifyPolicy::kNever bytes_read = bytes_needed; with the default policy
//    between that and the touched chunks' sizes, and exactly bytes_needed
//    where every overlap lies on tile boundaries (TileAligned: the format's
//    promise for reshards along tensor-parallel cuts); with
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
  // Whether every overlap lies on tile boundaries (TileAligned), so that the
  // default verify policy reads exactly the needed bytes; whether one of them
  // is part of its chunk (the case that matters).
  bool aligned = true;
  bool partial = false;
};

// The oracle of native version 4's promise (FORMAT.md "Verification"): a
// chunk's tiles end where a tensor-parallel degree t in [2, 8] dividing an
// axis's global size cuts it, on the last axis and on the rows' axis (the
// one of the two the chunk holds part of, both when it holds both whole),
// and at plane boundaries. An overlap whose ends on those two axes lie on
// such cuts (or on the chunk's edges) is read as whole tiles: no byte more.
bool OnCut(int64_t global, int64_t x) {
  for (int64_t t = 2; t <= 8; ++t) {
    if (global % t == 0 && x % (global / t) == 0) return true;
  }
  return false;
}

bool TileAligned(const Shape& global, const Box& chunk, const Box& overlap) {
  const size_t k = chunk.rank();
  if (k == 0) return false;
  const bool part_cols = chunk.shape[k - 1] < global[k - 1];
  const bool part_rows = k >= 2 && chunk.shape[k - 2] < global[k - 2];
  auto ends_ok = [&](size_t axis, bool cut) {
    const int64_t lo = overlap.offset[axis], hi = lo + overlap.shape[axis];
    const int64_t c0 = chunk.offset[axis], c1 = c0 + chunk.shape[axis];
    auto ok = [&](int64_t x) { return x == c0 || x == c1 || (cut && OnCut(global[axis], x)); };
    return ok(lo) && ok(hi);
  };
  if (!ends_ok(k - 1, part_cols || !part_rows)) return false;
  return k < 2 || ends_ok(k - 2, part_rows || !part_cols);
}

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
      const StoredChunk& chunk = stored.chunks[c];
      bytes.needed += static_cast<uint64_t>(n) * DTypeSize(stored.dtype);
      bytes.touched += chunk.length;
      const std::optional<Box> overlap = Intersect(chunk.box, want.GlobalBox());
      const bool boxed = !chunk.flat && !want.flattened_range && overlap;
      bytes.aligned =
          bytes.aligned && boxed && TileAligned(stored.global_shape, chunk.box, *overlap);
      bytes.partial = bytes.partial || !boxed || *overlap != chunk.box;
    }
  }
  return std::nullopt;
}

// `exact_partial`: set when every rank's overlaps are tile-aligned and one
// is part of its chunk (then the default policy must read no byte more).
std::optional<std::string> RunBytes(const Scenario& s, const std::string& work,
                                    bool* exact_partial) {
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
  bool aligned = true, partial = false;
  for (const RankBytes& r : oracle) aligned = aligned && r.aligned, partial = partial || r.partial;
  if (exact_partial) *exact_partial = aligned && partial;
  // kNever reads exactly the overlaps; kAlways every byte of the touched
  // chunks; the default (native v4) the touched tiles: in between, and
  // exactly the overlaps where they are tile-aligned.
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
      const bool exact = !blocks || want.aligned;
      const bool read_ok = exact ? sum.bytes_read == read
                                 : sum.bytes_read >= want.needed && sum.bytes_read <= want.touched;
      if (sum.bytes_needed != want.needed || !read_ok || sum.chunk_bytes != want.touched) {
        return fmt::format(
            "rank {} ({} verify): bytes needed {}, read {}, chunk bytes {}; the overlaps "
            "need {} bytes, reading {}, of chunks of {} bytes",
            rank, VerifyPolicyName(verify), sum.bytes_needed, sum.bytes_read, sum.chunk_bytes,
            want.needed,
            exact ? std::to_string(read) : fmt::format("{} to {}", want.needed, want.touched),
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
                  {"dtype-converting", 0.05},
                  {"tile-aligned-partial", 0.10}}},
                [&] {
                  const Scenario s = *GenReshardScenario(limits);
                  Tag(ReshardClasses(s));
                  bool exact_partial = false;
                  CheckScenario(s, limits, [&](const Scenario& c) {
                    return RunBytes(c, work, &c == &s ? &exact_partial : nullptr);
                  });
                  if (exact_partial) Tag({"tile-aligned-partial"});
                });
  fs::remove_all(work);
}

}  // namespace
}  // namespace distckpt
