#include "fsdp/layout.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"

namespace distckpt {
namespace {

int64_t RowSize(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

int64_t MegatronFsdpBucket::shard_size() const { return size / dp; }

MegatronFsdpBucket LayoutMegatronFsdpBucket(const std::vector<Shape>& shapes, int64_t dp) {
  if (dp < 1) Fail(ErrorKind::kInvalidArgument, "fsdp layout needs dp >= 1, got {}", dp);
  MegatronFsdpBucket b;
  b.dp = dp;
  std::vector<int64_t> numel;
  for (const Shape& s : shapes) {
    if (s.empty()) Fail(ErrorKind::kInvalidArgument, "fsdp layout: 0-d parameters have no rows");
    numel.push_back(Volume(s));
    if (RowSize(s) > 0) b.chunk_size_factor = std::lcm(b.chunk_size_factor, RowSize(s));
  }
  const int64_t chunk = b.chunk_size_factor;
  b.params.assign(shapes.size(), FlatRange{});
  std::vector<bool> placed(shapes.size(), false);
  int64_t cursor = 0;
  auto place = [&](size_t i, int64_t at) {
    b.params[i] = {at, at + numel[i]};
    placed[i] = true;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (placed[i]) continue;
    place(i, cursor);
    int64_t end = cursor + numel[i];
    int64_t boundary = RoundUp(end, chunk);
    cursor = boundary;
    if (numel[i] % chunk == 0) continue;
    int64_t gap_end = boundary;
    for (size_t j = i + 1; j < shapes.size(); ++j) {  // conjugate
      int64_t rem = numel[j] % chunk;
      if (!placed[j] && numel[j] > chunk && rem != 0 && rem <= boundary - end) {
        place(j, boundary - rem);
        gap_end = boundary - rem;
        cursor = b.params[j].stop;
        break;
      }
    }
    for (size_t j = i + 1; j < shapes.size(); ++j) {  // fragments fill the gap
      if (!placed[j] && numel[j] < chunk && numel[j] <= gap_end - end) {
        place(j, end);
        end += numel[j];
      }
    }
  }
  b.size = RoundUp(cursor, dp * chunk);
  return b;
}

FlatRange MegatronFsdpRows(const MegatronFsdpBucket& bucket, const std::vector<Shape>& shapes,
                           int param, int64_t rank) {
  const FlatRange& item = bucket.params[param];
  int64_t shard = bucket.shard_size();
  int64_t start = std::max(item.start, rank * shard),
          stop = std::min(item.stop, (rank + 1) * shard);
  int64_t row = RowSize(shapes[param]);
  if (start >= stop || row == 0) return {0, 0};
  return {(start - item.start) / row, (stop - item.start) / row};
}

FlatRange Fsdp2Rows(int64_t rows, int64_t dp, int64_t rank) {
  int64_t chunk = (rows + dp - 1) / dp;
  int64_t start = std::min(rank * chunk, rows);
  return {start, std::min(start + chunk, rows)};
}

FsdpLayout ParseFsdpLayout(std::string_view name) {
  if (name == "none") return FsdpLayout::kNone;
  if (name == "megatron") return FsdpLayout::kMegatron;
  if (name == "fsdp2") return FsdpLayout::kFsdp2;
  Fail(ErrorKind::kInvalidArgument, "unknown fsdp layout '{}' (expected none, megatron or fsdp2)",
       name);
}

std::vector<ShardedTensor> ShardForFsdp(FsdpLayout layout, const std::vector<ShardedTensor>& shards,
                                        int64_t dp, int64_t dp_rank) {
  if (layout == FsdpLayout::kNone) return shards;
  std::vector<FlatRange> rows(shards.size());
  if (layout == FsdpLayout::kFsdp2) {
    for (size_t i = 0; i < shards.size(); ++i)
      rows[i] = Fsdp2Rows(shards[i].local_shape.at(0), dp, dp_rank);
  } else {
    std::map<DType, std::vector<size_t>> buckets;
    for (size_t i = 0; i < shards.size(); ++i) buckets[shards[i].dtype].push_back(i);
    for (const auto& [dtype, members] : buckets) {
      std::vector<Shape> shapes;
      for (size_t i : members) shapes.push_back(shards[i].local_shape);
      MegatronFsdpBucket bucket = LayoutMegatronFsdpBucket(shapes, dp);
      for (size_t k = 0; k < members.size(); ++k) {
        rows[members[k]] = MegatronFsdpRows(bucket, shapes, static_cast<int>(k), dp_rank);
      }
    }
  }
  std::vector<ShardedTensor> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardedTensor& s = shards[i];
    if (s.flattened_range || s.local_shape.empty() || s.replica_id.size() != 3) {
      Fail(ErrorKind::kInvalidArgument,
           "fsdp: '{}' must be an unflattened, at least 1-d shard with a (PP, TP, DP) replica id",
           s.key);
    }
    ShardedTensor t = s.WithoutData();
    const size_t axis = static_cast<size_t>(s.prepend_axis_num);
    t.local_shape[0] = rows[i].size();
    t.global_offset[axis] += rows[i].start;
    t.axis_fragmentations.reset();
    t.replica_id = {s.replica_id[0], s.replica_id[1], 0};
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace distckpt
