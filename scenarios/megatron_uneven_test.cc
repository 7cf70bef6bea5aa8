// Ports of test_serialization.py's uneven 1-D sharding tests (docs/megatron-semantics.md
// §9.2 rows 66 and 67): every listed (save split, load split) pair, including
// empty shards and several shards per rank, over Megatron's 8 ranks.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "comm/thread_world.h"
#include "engine/common_state.h"
#include "engine/load.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "mapping/dict_utils.h"
#include "mapping/testing.h"
#include "megatron_testutil.h"

namespace distckpt::megatron {
namespace {

constexpr DType kF32 = DType::kF32;

// #66 / #67 test_uneven_1d_sharding(_multiple_shards): a 1-D tensor split
// unevenly (no regular grid; empty shards allowed): rank r holds the shards
// of lengths split[r], laid out in rank order. Every element holds the rank
// that `dest` gives it, so after loading with `dest` each shard is all `rank`.
using RankSplit = std::vector<std::vector<int64_t>>;  // per rank, its shards' lengths

struct UnevenCase {
  RankSplit src;
  RankSplit dest;  // empty = src
};

std::string SplitToString(const RankSplit& split) {
  std::vector<std::string> ranks;
  for (const auto& shards : split) ranks.push_back(fmt::format("[{}]", fmt::join(shards, ", ")));
  return fmt::format("[{}]", fmt::join(ranks, ", "));
}

void PrintTo(const UnevenCase& c, std::ostream* os) {
  *os << "src " << SplitToString(c.src) << " dest "
      << (c.dest.empty() ? "= src" : SplitToString(c.dest));
}

// The shards of `split` for `rank`, as (global offset, length).
std::vector<std::pair<int64_t, int64_t>> ShardsOf(const RankSplit& split, int rank) {
  int64_t offset = 0;
  for (int r = 0; r < rank; ++r) {
    for (int64_t length : split[r]) offset += length;
  }
  std::vector<std::pair<int64_t, int64_t>> shards;
  for (int64_t length : split[rank]) {
    shards.emplace_back(offset, length);
    offset += length;
  }
  return shards;
}

int64_t TotalLength(const RankSplit& split) {
  int64_t total = 0;
  for (const auto& shards : split) {
    for (int64_t length : shards) total += length;
  }
  return total;
}

// Megatron's direct construction of an uneven shard (axis_fragmentations None).
ShardedTensor UnevenShard(int64_t global_length, int64_t offset, Tensor data) {
  ShardedTensor t;
  t.key = "uneven";
  t.dtype = data.dtype();
  t.local_shape = data.shape();
  t.global_shape = {global_length};
  t.global_offset = {offset};
  t.axis_fragmentations = std::nullopt;
  t.data = std::move(data);
  t.ValidateMetadataIntegrity();
  return t;
}

class MegatronUnevenShardingTest : public ::testing::TestWithParam<UnevenCase> {};

TEST_P(MegatronUnevenShardingTest, EveryLoadedShardHoldsItsRank) {
  const RankSplit& src = GetParam().src;
  const RankSplit& dest = GetParam().dest.empty() ? src : GetParam().dest;
  ASSERT_EQ(src.size(), static_cast<size_t>(kWorldSize));
  ASSERT_EQ(dest.size(), static_cast<size_t>(kWorldSize));
  const int64_t length = TotalLength(src);
  ASSERT_EQ(length, TotalLength(dest));
  std::vector<float> owner(length);
  for (int r = 0; r < kWorldSize; ++r) {
    for (const auto& [offset, n] : ShardsOf(dest, r)) std::fill_n(owner.begin() + offset, n, r);
  }
  ScratchDir scratch("uneven_1d_sharding");
  const std::string dir = scratch.Sub("ckpt");
  ModelParallel(2, 4);  // Megatron initializes TP2 PP4; only the world size matters
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    Dict sd;
    int i = 0;
    for (const auto& [offset, n] : ShardsOf(src, rank)) {
      Tensor data = Tensor::Empty(kF32, {n});
      std::copy_n(owner.begin() + offset, n, data.data_as<float>());
      sd[std::to_string(i++)] = UnevenShard(length, offset, data);
    }
    Save(Node(sd), dir, comm);

    Dict request;
    i = 0;
    for (const auto& [offset, n] : ShardsOf(dest, rank)) {
      request[std::to_string(i++)] = UnevenShard(length, offset, Full(kF32, {n}, -1));
    }
    LoadResult loaded = Load(Node(request), dir, comm);
    EXPECT_EQ(KeysOf(loaded.state_dict), KeysOf(Node(request)));
    i = 0;
    for (const auto& [offset, n] : ShardsOf(dest, rank)) {
      const std::string key = std::to_string(i++);
      EXPECT_EQ(ValuesAt(loaded.state_dict, key), std::vector<double>(n, rank))
          << "rank " << rank << " shard " << key << " at " << offset;
    }
  });
}

RankSplit OneShardEach(const std::vector<int64_t>& lengths) {
  RankSplit split;
  for (int64_t n : lengths) split.push_back({n});
  return split;
}

RankSplit Repeat(std::vector<int64_t> shards, int times) { return RankSplit(times, shards); }

RankSplit Concat(RankSplit a, const RankSplit& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// #66: every (src_split, dest_split) pair of Megatron's parametrization.
INSTANTIATE_TEST_SUITE_P(OneShardPerRank, MegatronUnevenShardingTest,
                         ::testing::Values(UnevenCase{OneShardEach({3, 3, 3, 3, 3, 3, 3, 3}), {}},
                                           UnevenCase{OneShardEach({1, 2, 3, 4, 5, 6, 7, 8}), {}},
                                           UnevenCase{OneShardEach({1, 5, 7, 3, 6, 2, 5, 4}), {}},
                                           UnevenCase{OneShardEach({2, 2, 2, 2, 2, 2, 2, 1}), {}},
                                           UnevenCase{OneShardEach({2, 2, 2, 2, 2, 2, 2, 10}), {}},
                                           UnevenCase{OneShardEach({3, 3, 3, 3, 3, 3, 3, 3}),
                                                      OneShardEach({1, 1, 1, 1, 1, 1, 2, 16})},
                                           UnevenCase{OneShardEach({1, 5, 7, 3, 6, 2, 5, 4}),
                                                      OneShardEach({14, 3, 6, 3, 1, 1, 2, 3})},
                                           UnevenCase{OneShardEach({5, 5, 5, 5, 5, 5, 0, 0}),
                                                      OneShardEach({5, 0, 5, 0, 5, 5, 3, 7})},
                                           UnevenCase{OneShardEach({15, 0, 0, 0, 0, 0, 0, 0}),
                                                      OneShardEach({0, 0, 0, 3, 3, 3, 3, 3})}));

// #67: several shards per rank (state dict {i: shard}); [] = no shard at all.
INSTANTIATE_TEST_SUITE_P(
    MultipleShardsPerRank, MegatronUnevenShardingTest,
    ::testing::Values(UnevenCase{Repeat({3}, 8), {}},
                      UnevenCase{Concat(Repeat({}, 7), {{3, 3}}), {}},
                      UnevenCase{{{4}, {7, 8}, {1}, {1}, {1}, {1}, {1}, {3, 3}}, {}},
                      UnevenCase{Concat(Repeat({2}, 5), Repeat({10}, 3)),
                                 Concat(Repeat({10}, 3), Repeat({2}, 5))},
                      UnevenCase{{{4}, {7, 8}, {1}, {1}, {1}, {1}, {1}, {3, 3}},
                                 {{2, 4}, {}, {5}, {}, {5, 9}, {}, {1, 1, 1, 1, 1}, {}}},
                      UnevenCase{Repeat({3}, 8), Concat(Repeat({2, 4}, 4), Repeat({}, 4))}));

// #71 test_sharded_metadata: tensors keyed by key, objects by unique key
// ('ObjB/shard_0.3_1.8'); the metadata dict itself is a loadable request.
}  // namespace
}  // namespace distckpt::megatron
