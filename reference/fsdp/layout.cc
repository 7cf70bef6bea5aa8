#include "fsdp/layout.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

#include "core/error.h"

namespace distckpt {
namespace {

// Shapes come from files (fsdp-dtensor-export reads them from safetensors
// headers): the bucket's arithmetic is checked, a result past int64 refused.
[[noreturn]] void Overflow(const std::vector<Shape>& shapes, int64_t dp, const char* what) {
  std::string list;
  for (const Shape& s : shapes) list += (list.empty() ? "" : ", ") + ShapeToString(s);
  Fail(ErrorKind::kInvalidArgument,
       "fsdp layout of a bucket of {} parameters ({}) over dp={}: {} passes 2^63", shapes.size(),
       list.size() > 200 ? list.substr(0, 200) + "..." : list, dp, what);
}

int64_t Mul(int64_t a, int64_t b, const std::vector<Shape>& shapes, int64_t dp, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) Overflow(shapes, dp, what);
  return r;
}

int64_t Add(int64_t a, int64_t b, const std::vector<Shape>& shapes, int64_t dp, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) Overflow(shapes, dp, what);
  return r;
}

// Elements per row (shape[1:]); a 0-row shape's rows may be as large as
// anything: checked.
int64_t RowSize(const Shape& shape, const std::vector<Shape>& shapes, int64_t dp) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n = Mul(n, shape[i], shapes, dp, "a row's size");
  return n;
}

// n rounded up to a multiple of `multiple` (> 0).
int64_t RoundUp(int64_t n, int64_t multiple, const std::vector<Shape>& shapes, int64_t dp) {
  const int64_t r = n % multiple;
  return r == 0 ? n : Add(n, multiple - r, shapes, dp, "a chunk boundary");
}

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
    const int64_t row = RowSize(s, shapes, dp);
    if (row > 0) {  // lcm, checked
      const int64_t factor = b.chunk_size_factor / std::gcd(b.chunk_size_factor, row);
      b.chunk_size_factor = Mul(factor, row, shapes, dp, "the chunk size (lcm of row sizes)");
    }
  }
  const int64_t chunk = b.chunk_size_factor;
  b.params.assign(shapes.size(), FlatRange{});
  std::vector<bool> placed(shapes.size(), false);
  int64_t cursor = 0;
  auto place = [&](size_t i, int64_t at) {
    b.params[i] = {at, Add(at, numel[i], shapes, dp, "the bucket's size")};
    placed[i] = true;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (placed[i]) continue;
    place(i, cursor);
    int64_t end = b.params[i].stop;
    int64_t boundary = RoundUp(end, chunk, shapes, dp);
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
  b.size = RoundUp(cursor, Mul(dp, chunk, shapes, dp, "dp x chunk"), shapes, dp);
  return b;
}

FlatRange MegatronFsdpRows(const MegatronFsdpBucket& bucket, const std::vector<Shape>& shapes,
                           int param, int64_t rank) {
  if (rank < 0 || rank >= bucket.dp) {
    Fail(ErrorKind::kInvalidArgument, "fsdp layout over dp={} has no rank {}", bucket.dp, rank);
  }
  const FlatRange& item = bucket.params[param];
  int64_t shard = bucket.shard_size();
  int64_t start = std::max(item.start, rank * shard),
          stop = std::min(item.stop, (rank + 1) * shard);
  int64_t row = RowSize(shapes[param], shapes, bucket.dp);
  if (start >= stop || row == 0) return {0, 0};
  return {(start - item.start) / row, (stop - item.start) / row};
}

FlatRange Fsdp2Rows(int64_t rows, int64_t dp, int64_t rank) {
  if (rows < 0 || dp < 1 || rank < 0 || rank >= dp) {
    Fail(ErrorKind::kInvalidArgument, "torch.chunk of {} rows into {} parts has no part {}", rows,
         dp, rank);
  }
  const int64_t chunk = rows / dp + (rows % dp != 0);  // ceil, without overflow near 2^63
  // rank * chunk may pass int64 when it is past the end anyway.
  const int64_t start = chunk == 0 || rank > rows / chunk ? rows : rank * chunk;
  return {start, start + std::min(chunk, rows - start)};
}

FsdpLayout ParseFsdpLayout(std::string_view name) {
  if (name == "none") return FsdpLayout::kNone;
  if (name == "megatron") return FsdpLayout::kMegatron;
  if (name == "fsdp2") return FsdpLayout::kFsdp2;
  Fail(ErrorKind::kInvalidArgument, "unknown fsdp layout '{}' (expected none, megatron or fsdp2)",
       name);
}

FsdpGroup DenseFsdpGroup(const Topology& topo, int rank) {
  RankCoords c = topo.Coords(rank);
  const int64_t shard = topo.dp_shard_size();
  return {shard * topo.cp, (c.dp % shard) * topo.cp + c.cp, c.dp / shard};
}

FsdpGroup ExpertFsdpGroup(const Topology& topo, int rank) {
  if (topo.dp_shard != 0 && topo.ep > 1) {
    Fail(ErrorKind::kUnsupported,
         "topology dp_shard: HSDP of expert parameters with ep={} is not supported ({})", topo.ep,
         topo.ToString());
  }
  RankCoords c = topo.Coords(rank);
  return {topo.edp(), c.edp, 0};
}

std::vector<std::vector<ShardedTensor>> ShardParamsForFsdp(FsdpLayout layout,
                                                           const std::vector<FsdpParam>& params,
                                                           const FsdpGroup& dense,
                                                           const FsdpGroup& expert) {
  std::vector<std::vector<ShardedTensor>> out;
  if (layout == FsdpLayout::kNone) {
    for (const FsdpParam& p : params) out.push_back(p.pieces);
    return out;
  }
  // Each parameter's concatenated local shape (rows summed over pieces).
  std::vector<Shape> shapes;
  for (const FsdpParam& p : params) {
    if (p.pieces.empty()) Fail(ErrorKind::kInvalidArgument, "fsdp: a parameter without pieces");
    for (const ShardedTensor& s : p.pieces) {
      if (s.flattened_range || s.local_shape.empty() || s.replica_id.size() != 3) {
        Fail(ErrorKind::kInvalidArgument,
             "fsdp: '{}' must be an unflattened, at least 1-d shard with a (PP, TP, DP) replica id",
             s.key);
      }
      if (s.local_shape.size() != p.pieces.front().local_shape.size() ||
          !std::equal(s.local_shape.begin() + 1, s.local_shape.end(),
                      p.pieces.front().local_shape.begin() + 1)) {
        Fail(ErrorKind::kInvalidArgument, "fsdp: the pieces of '{}' differ in row shape", s.key);
      }
    }
    Shape shape = p.pieces.front().local_shape;
    shape[0] = 0;
    for (const ShardedTensor& s : p.pieces) shape[0] += s.local_shape[0];
    shapes.push_back(std::move(shape));
  }
  std::vector<FlatRange> rows(params.size());
  if (layout == FsdpLayout::kFsdp2) {
    for (size_t i = 0; i < params.size(); ++i) {
      const FsdpGroup& g = params[i].expert ? expert : dense;
      rows[i] = Fsdp2Rows(shapes[i][0], g.size, g.rank);
    }
  } else {
    std::map<std::tuple<DType, bool, int64_t>, std::vector<size_t>> buckets;
    for (size_t i = 0; i < params.size(); ++i) {
      buckets[{params[i].pieces.front().dtype, params[i].expert, params[i].unit}].push_back(i);
    }
    for (const auto& [id, members] : buckets) {
      const FsdpGroup& g = std::get<1>(id) ? expert : dense;
      std::vector<Shape> bucket_shapes;
      for (size_t i : members) bucket_shapes.push_back(shapes[i]);
      MegatronFsdpBucket bucket = LayoutMegatronFsdpBucket(bucket_shapes, g.size);
      for (size_t k = 0; k < members.size(); ++k) {
        rows[members[k]] = MegatronFsdpRows(bucket, bucket_shapes, static_cast<int>(k), g.rank);
      }
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const FsdpGroup& g = params[i].expert ? expert : dense;
    std::vector<ShardedTensor> pieces;
    int64_t first = 0;  // the piece's first row in the concatenated local tensor
    for (const ShardedTensor& s : params[i].pieces) {
      const int64_t n = s.local_shape[0];
      const int64_t start = std::clamp(rows[i].start - first, int64_t{0}, n);
      const int64_t stop = std::clamp(rows[i].stop - first, start, n);
      first += n;
      ShardedTensor t = s.WithoutData();
      const size_t axis = static_cast<size_t>(s.prepend_axis_num);
      t.local_shape[0] = stop - start;
      t.global_offset[axis] += start;
      t.axis_fragmentations.reset();
      t.replica_id = {s.replica_id[0], s.replica_id[1], g.replica};
      pieces.push_back(std::move(t));
    }
    out.push_back(std::move(pieces));
  }
  return out;
}

std::vector<ShardedTensor> ShardForFsdp(FsdpLayout layout, const std::vector<ShardedTensor>& shards,
                                        const FsdpGroup& group) {
  std::vector<FsdpParam> params;
  for (const ShardedTensor& s : shards) params.push_back({{s}, -1, false});
  std::vector<ShardedTensor> out;
  for (auto& pieces : ShardParamsForFsdp(layout, params, group, group)) {
    out.push_back(std::move(pieces.front()));
  }
  return out;
}

}  // namespace distckpt
