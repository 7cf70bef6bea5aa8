// Sharding validation of one ShardedTensor key across ranks
// (docs/megatron-semantics.md §2.2): consistency, flattened-range tiling, the
// main-replica count grid of regular grids, exact tiling of uneven shardings.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_map>

#include "mapping/py_format.h"
#include "mapping/tiling.h"
#include "mapping/validation_internal.h"

namespace distckpt {

namespace {

constexpr size_t kMaxExamples = 3;

// The fields every shard of a key must agree on, as printable values
// (local_shape only matters for regular grids).
std::vector<std::pair<std::string_view, std::string>> AgreedFields(const ShardedTensor& t) {
  return {{"dtype", std::string(DTypeName(t.dtype))},
          {"global_shape", ShapeToString(t.global_shape)},
          {"axis_fragmentations",
           t.axis_fragmentations ? ShapeToString(*t.axis_fragmentations) : "None"},
          {"local_shape", t.has_regular_grid() ? ShapeToString(t.local_shape) : "any"},
          {"flattening", t.flattened_range ? "flattened" : "not flattened"}};
}

// Megatron asserts these with a bare `assert`; we name the key, the ranks
// and the two values.
std::optional<std::string> CheckConsistency(std::span<const RankTensor> shards) {
  const RankTensor& first = shards[0];
  const ShardedTensor& a = *first.tensor;
  for (const RankTensor& other : shards) {
    const ShardedTensor& b = *other.tensor;
    b.ValidateLayoutIntegrity();  // hand-built metadata may break the rules
    // Fast path: equal fields print equally (the printable values are built
    // only when some field differs, as that may still print the same).
    if (a.dtype == b.dtype && a.global_shape == b.global_shape &&
        a.axis_fragmentations == b.axis_fragmentations && a.local_shape == b.local_shape &&
        a.flattened_range.has_value() == b.flattened_range.has_value()) {
      continue;
    }
    const auto expected = AgreedFields(a);
    const auto actual = AgreedFields(b);
    for (size_t i = 0; i < expected.size(); ++i) {
      if (actual[i].second == expected[i].second) continue;
      return fmt::format(
          "Inconsistent {} for ShardedTensor key {}: {} on rank {} but {} on rank {}",
          expected[i].first, PyRepr(first.tensor->key), expected[i].second, first.rank,
          actual[i].second, other.rank);
    }
  }
  return std::nullopt;
}

// Flattened keys: per local chunk, the main replicas' flat ranges must tile
// [0, numel). Fills `mains` with one entry per chunk that has main replicas
// (Megatron clamps the chunk's count to 1).
std::optional<std::string> CheckFlattened(std::span<const RankTensor> shards,
                                          std::vector<RankTensor>& mains) {
  struct Chunk {
    const RankTensor* first = nullptr;
    const RankTensor* first_main = nullptr;
    std::vector<std::pair<int64_t, int64_t>> ranges;
  };
  std::map<std::pair<Shape, Shape>, size_t> index;
  std::vector<Chunk> chunks;  // in order of first appearance, as Megatron's map_reduce
  for (const RankTensor& s : shards) {
    auto [it, inserted] = index.emplace(
        std::make_pair(s.tensor->global_offset, s.tensor->local_shape), chunks.size());
    if (inserted) chunks.push_back(Chunk{&s, nullptr, {}});
    Chunk& chunk = chunks[it->second];
    if (!IsMainReplica(s.tensor->replica_id)) continue;
    if (chunk.first_main == nullptr) chunk.first_main = &s;
    chunk.ranges.emplace_back(s.tensor->flattened_range->start, s.tensor->flattened_range->stop);
  }
  for (Chunk& chunk : chunks) {
    if (chunk.ranges.empty()) continue;  // no main replica: the coverage check reports it
    std::sort(chunk.ranges.begin(), chunk.ranges.end());
    const int64_t size = Volume(chunk.first->tensor->local_shape);
    bool ok = chunk.ranges.front().first == 0 && chunk.ranges.back().second == size;
    std::vector<int64_t> starts, stops;
    for (size_t i = 0; i < chunk.ranges.size(); ++i) {
      starts.push_back(chunk.ranges[i].first);
      stops.push_back(chunk.ranges[i].second);
      if (i > 0 && chunk.ranges[i].first != chunk.ranges[i - 1].second) ok = false;
    }
    if (!ok) {
      return fmt::format(
          "Flattened ranges dont cover the whole shard {} of size {}. Ranges: ([{}], [{}])",
          chunk.first->tensor->ToString(), size, fmt::join(starts, ", "), fmt::join(stops, ", "));
    }
    mains.push_back(*chunk.first_main);
  }
  return std::nullopt;
}

// Regular grid: main-replica count per chunk of the axis_fragmentations grid;
// every count must be 1.
std::optional<std::string> CheckGrid(const ShardedTensor& first,
                                     std::span<const RankTensor> mains) {
  const Shape& grid = *first.axis_fragmentations;
  if (grid.size() != first.global_shape.size()) {
    return fmt::format(
        "Invalid access pattern for {}: axis_fragmentations {} do not match global shape {}",
        first.ToString(), ShapeToString(grid), ShapeToString(first.global_shape));
  }
  if (Volume(first.local_shape) == 0) {
    if (Volume(first.global_shape) == 0) return std::nullopt;
    return fmt::format(
        "Invalid access pattern for {}: empty local chunks cannot cover global shape {}",
        first.ToString(), ShapeToString(first.global_shape));
  }
  // Each main replica's cell of the grid, in row-major order; sorted, they
  // must be exactly 0, 1, ..., cells - 1.
  std::vector<int64_t> cells;
  cells.reserve(mains.size());
  for (const RankTensor& m : mains) {
    int64_t linear = 0;
    for (size_t axis = 0; axis < grid.size(); ++axis) {
      const int64_t at = m.tensor->LocalChunkOffsetInGlobal(axis);
      if (at < 0 || at >= grid[axis]) {
        return fmt::format(
            "Invalid access pattern for {}: chunk {} on rank {} lies outside the chunk grid {}",
            first.ToString(), ShapeToString(m.tensor->LocalChunkOffsetInGlobal()), m.rank,
            ShapeToString(grid));
      }
      linear = linear * grid[axis] + at;
    }
    cells.push_back(linear);
  }
  std::sort(cells.begin(), cells.end());
  bool ok = static_cast<int64_t>(cells.size()) == Volume(grid);
  for (size_t i = 0; ok && i < cells.size(); ++i) ok = cells[i] == static_cast<int64_t>(i);
  if (ok) return std::nullopt;
  std::unordered_map<int64_t, int64_t> counts;
  for (int64_t linear : cells) ++counts[linear];
  const std::string grid_text = NumpyIntArrayStr(grid, [&counts](int64_t linear) {
    auto it = counts.find(linear);
    return it == counts.end() ? int64_t{0} : it->second;
  });
  return fmt::format("Invalid access pattern for {}: {}", first.ToString(), grid_text);
}

// Uneven sharding (no grid): Megatron defers to DCP; we require the main
// replicas' boxes to tile the global box exactly.
std::optional<std::string> CheckUneven(const ShardedTensor& first,
                                       std::span<const RankTensor> mains) {
  std::vector<Box> boxes;
  for (const RankTensor& m : mains) boxes.push_back(m.tensor->GlobalBox());
  const TilingCheck tiling = CheckTiling(first.global_shape, boxes, kMaxExamples);
  if (tiling.ok()) return std::nullopt;
  std::vector<std::string> problems;
  for (size_t i : tiling.outside) {
    problems.push_back(fmt::format("main replica {} on rank {} lies outside the global shape {}",
                                   boxes[i].ToString(), mains[i].rank,
                                   ShapeToString(first.global_shape)));
  }
  for (const auto& [i, j] : tiling.overlaps) {
    problems.push_back(fmt::format("main replicas {} on rank {} and {} on rank {} overlap",
                                   boxes[i].ToString(), mains[i].rank, boxes[j].ToString(),
                                   mains[j].rank));
  }
  if (tiling.gap) {
    problems.push_back(fmt::format("main replicas cover {} of {} elements, e.g. {} is not covered",
                                   tiling.covered, Volume(first.global_shape),
                                   tiling.gap->ToString()));
  }
  return fmt::format("Invalid access pattern for {}: {}", first.ToString(),
                     fmt::join(problems, "; "));
}

}  // namespace

std::optional<std::string> CheckTensorKey(std::span<const RankTensor> shards) {
  if (std::optional<std::string> error = CheckConsistency(shards)) return error;
  const ShardedTensor& first = *shards[0].tensor;
  // The main replicas: often every shard (then no copy).
  std::vector<RankTensor> kept;
  std::span<const RankTensor> mains = shards;
  if (first.flattened_range) {
    if (std::optional<std::string> error = CheckFlattened(shards, kept)) return error;
    mains = kept;
  } else if (!std::all_of(shards.begin(), shards.end(), [](const RankTensor& s) {
               return IsMainReplica(s.tensor->replica_id);
             })) {
    std::copy_if(shards.begin(), shards.end(), std::back_inserter(kept),
                 [](const RankTensor& s) { return IsMainReplica(s.tensor->replica_id); });
    mains = kept;
  }
  return first.has_regular_grid() ? CheckGrid(first, mains) : CheckUneven(first, mains);
}

}  // namespace distckpt
