// Tests of sharding validation over hand-built 8-rank metadata: Megatron's
// test_flattened_tensors_are_properly_validated (#8), the count grid, uneven
// tilings, objects, the JSON exchange form and the common-state warning.
#include "mapping/validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "mapping/testing.h"

namespace distckpt {
namespace {

using nlohmann::json;
using testing::HasSubstr;
using testing::Not;

constexpr int kWorld = 8;

std::string ValidationError(const GlobalMetadata& md) {
  return ErrorMessage(ErrorKind::kInvalidSharding, [&] { ValidateShardingIntegrity(md); });
}

ShardedTensor Meta(const std::string& key, Shape local, std::vector<RankOffset> offsets,
                   ReplicaId replica = {0}) {
  return ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, std::move(local), offsets,
                                            std::move(replica));
}

// Rows of a (6, 6) tensor: ranks 0-2 hold flat pieces [0,1), [1,3), [3,6) of
// row 0, ranks 3-7 hold rows 1-5 whole (all flattened).
GlobalMetadata FlatMetadata(int dropped_rank) {
  GlobalMetadata md(kWorld);
  const FlatRange ranges[] = {{0, 1}, {1, 3}, {3, 6}};
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == dropped_rank) continue;
    ShardedTensor t = Meta("flat", {1, 6}, {{0, std::max(0, rank - 2), 6}});
    t.flattened_range = rank < 3 ? ranges[rank] : FlatRange{0, 6};
    md[rank].push_back(t);
  }
  return md;
}

TEST(ValidationTest, FlattenedTensorsAreProperlyValidated) {
  EXPECT_NO_THROW(ValidateShardingIntegrity(FlatMetadata(-1)));
  EXPECT_THAT(
      ValidationError(FlatMetadata(1)),
      HasSubstr("Flattened ranges dont cover the whole shard ShardedTensor(key='flat', dtype=f32, "
                "local_shape=(1, 6), global_shape=(6, 6), global_offset=(0, 0), "
                "axis_fragmentations=(6, 1), replica_id=0, prepend_axis_num=0, "
                "allow_shape_mismatch=False, flattened_range=slice(0, 1, None)) of size 6. "
                "Ranges: ([0, 3], [1, 6])"));
  const std::string missing_row = ValidationError(FlatMetadata(4));
  EXPECT_THAT(missing_row,
              HasSubstr("Invalid sharding pattern validation. Errors: Invalid access pattern for "
                        "ShardedTensor(key='flat'"));
  EXPECT_THAT(missing_row,
              HasSubstr("flattened_range=slice(0, 1, None)): [[1]\n [1]\n [0]\n [1]\n [1]\n [1]]"));
  EXPECT_THAT(missing_row, Not(HasSubstr("Flattened ranges")));
}

// test_serialization's base state dict (#68) is valid on 8 ranks.
TEST(ValidationTest, MegatronBaseStateDictIsValid) {
  GlobalMetadata md(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    md[rank].push_back(Meta("TenA", {2}, {}, {rank}));
    md[rank].push_back(Meta("TenB", {3}, {{0, rank, kWorld}}));
    md[rank].push_back(Meta("TenC", {3}, {}, {kWorld - 1 - rank}));
    md[rank].push_back(ShardedObject{"ObjA", {}, {1}, {0}, {rank}});
    md[rank].push_back(ShardedObject{"ObjB", {}, {1, kWorld}, {0, rank}, {0}});
  }
  EXPECT_NO_THROW(ValidateShardingIntegrity(md));
}

TEST(ValidationTest, CountGridNamesMissingAndDuplicateChunks) {
  GlobalMetadata md(kWorld);
  md[0].push_back(Meta("w", {2, 2}, {{0, 0, 2}, {1, 0, 2}}));
  md[1].push_back(Meta("w", {2, 2}, {{0, 1, 2}, {1, 0, 2}}));
  md[2].push_back(Meta("w", {2, 2}, {{0, 1, 2}, {1, 1, 2}}));
  md[3].push_back(Meta("w", {2, 2}, {{0, 1, 2}, {1, 1, 2}}));
  md[4].push_back(Meta("w", {2, 2}, {{0, 0, 2}, {1, 1, 2}}, {1}));  // not a main replica
  EXPECT_EQ(
      ValidationError(md),
      "Invalid sharding pattern validation. Errors: Invalid access pattern for "
      "ShardedTensor(key='w', "
      "dtype=f32, local_shape=(2, 2), global_shape=(4, 4), global_offset=(0, 0), "
      "axis_fragmentations=(2, 2), replica_id=0, prepend_axis_num=0, allow_shape_mismatch=False, "
      "flattened_range=None): [[1 0]\n [1 2]]");
}

TEST(ValidationTest, InconsistentMetadataNamesKeyRanksAndValues) {
  GlobalMetadata md(2);
  md[0].push_back(Meta("w", {2}, {{0, 0, 2}}));
  ShardedTensor other = Meta("w", {2}, {{0, 1, 2}});
  other.dtype = DType::kBF16;
  md[1].push_back(other);
  EXPECT_THAT(
      ValidationError(md),
      HasSubstr("Inconsistent dtype for ShardedTensor key 'w': f32 on rank 0 but bf16 on rank 1"));

  md[1][0] = Meta("w", {3}, {{0, 1, 2}});
  EXPECT_THAT(ValidationError(md), HasSubstr("Inconsistent global_shape for ShardedTensor key 'w': "
                                             "(4,) on rank 0 but (6,) on rank 1"));

  ShardedTensor flat = Meta("w", {2}, {{0, 1, 2}});
  flat.flattened_range = FlatRange{0, 2};
  md[1][0] = flat;
  EXPECT_THAT(
      ValidationError(md),
      HasSubstr("Inconsistent flattening for ShardedTensor key 'w': not flattened on rank 0 but "
                "flattened on rank 1"));

  ShardedTensor uneven = Meta("w", {2}, {{0, 1, 2}});
  uneven.axis_fragmentations.reset();
  md[1][0] = uneven;
  EXPECT_THAT(ValidationError(md), HasSubstr("Inconsistent axis_fragmentations for ShardedTensor "
                                             "key 'w': (2,) on rank 0 but None on rank 1"));
}

// A 1-D tensor split unevenly: rank r holds sizes[r] elements after the
// previous ranks' (empty shards allowed), as in test_uneven_1d_sharding (#66).
GlobalMetadata Uneven1d(const std::vector<std::vector<int64_t>>& sizes_per_rank) {
  int64_t total = 0;
  for (const auto& sizes : sizes_per_rank) {
    for (int64_t s : sizes) total += s;
  }
  GlobalMetadata md(sizes_per_rank.size());
  int64_t offset = 0;
  for (size_t rank = 0; rank < sizes_per_rank.size(); ++rank) {
    for (int64_t size : sizes_per_rank[rank]) {
      ShardedTensor t;
      t.key = "u";
      t.local_shape = {size};
      t.global_shape = {total};
      t.global_offset = {offset};
      t.ValidateMetadataIntegrity();
      md[rank].push_back(t);
      offset += size;
    }
  }
  return md;
}

TEST(ValidationTest, UnevenShardingsThatTileAreValid) {
  using Split = std::vector<std::vector<int64_t>>;
  for (const Split& split :
       {Split{{3}, {3}, {3}, {3}, {3}, {3}, {3}, {3}},
        Split{{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}},
        Split{{1}, {5}, {7}, {3}, {6}, {2}, {5}, {4}},
        Split{{2}, {2}, {2}, {2}, {2}, {2}, {2}, {10}},
        Split{{5}, {5}, {5}, {5}, {5}, {5}, {0}, {0}},
        Split{{15}, {0}, {0}, {0}, {0}, {0}, {0}, {0}}, Split{{}, {}, {}, {}, {}, {}, {}, {3, 3}},
        Split{{4}, {7, 8}, {1}, {1}, {1}, {1}, {1}, {3, 3}}}) {
    EXPECT_NO_THROW(ValidateShardingIntegrity(Uneven1d(split)));
  }
}

TEST(ValidationTest, UnevenGapIsReportedWithAnUncoveredBox) {
  GlobalMetadata md = Uneven1d({{3}, {3}, {3}, {3}});
  md[2].clear();  // elements [6, 9) are nobody's
  EXPECT_EQ(
      ValidationError(md),
      "Invalid sharding pattern validation. Errors: Invalid access pattern for "
      "ShardedTensor(key='u', "
      "dtype=f32, local_shape=(3,), global_shape=(12,), global_offset=(0,), "
      "axis_fragmentations=None, "
      "replica_id=0, prepend_axis_num=0, allow_shape_mismatch=False, flattened_range=None): main "
      "replicas cover 9 of 12 elements, e.g. [6:9] is not covered");
}

TEST(ValidationTest, UnevenOverlapNamesBothBoxesAndRanks) {
  GlobalMetadata md = Uneven1d({{3}, {3}, {3}, {3}});
  std::get<ShardedTensor>(md[1][0]).global_offset = {2};  // [2:5] over rank 0's [0:3]
  std::get<ShardedTensor>(md[3][0]).global_offset = {8};  // [8:11] over rank 2's [6:9]
  const std::string message = ValidationError(md);
  EXPECT_THAT(message, HasSubstr("main replicas [0:3] on rank 0 and [2:5] on rank 1 overlap"));
  EXPECT_THAT(message, HasSubstr("main replicas [6:9] on rank 2 and [8:11] on rank 3 overlap"));
}

TEST(ValidationTest, UnevenNonMainReplicasDoNotCount) {
  GlobalMetadata md = Uneven1d({{3}, {3}});
  ShardedTensor copy = std::get<ShardedTensor>(md[0][0]);
  copy.replica_id = {1};
  md[1].push_back(copy);  // a replica of rank 0's shard
  EXPECT_NO_THROW(ValidateShardingIntegrity(md));
  copy.replica_id = {0};
  md[1].back() = copy;
  EXPECT_THAT(ValidationError(md),
              HasSubstr("main replicas [0:3] on rank 0 and [0:3] on rank 1 overlap"));
}

// 10^5 uneven chunks of a (1000, 1000) tensor: every row is split at
// row-dependent columns, so no regular grid describes it.
TEST(ValidationTest, UnevenTilingScalesTo100kChunks) {
  GlobalMetadata md(kWorld);
  int64_t chunks = 0;
  for (int64_t row = 0; row < 1000; ++row) {
    for (int64_t col = 0; col < 1000;) {
      const int64_t width = std::min<int64_t>(col == 0 ? 1 + row % 9 : 10, 1000 - col);
      ShardedTensor t;
      t.key = "big";
      t.local_shape = {1, width};
      t.global_shape = {1000, 1000};
      t.global_offset = {row, col};
      md[chunks++ % kWorld].push_back(t);
      col += width;
    }
  }
  ASSERT_GE(chunks, 100000);
  EXPECT_NO_THROW(ValidateShardingIntegrity(md));
  // Widen one chunk in the middle of a row: it now overlaps its right neighbour.
  auto inner = std::find_if(md[3].begin() + 5000, md[3].end(), [](const ShardedMeta& m) {
    const ShardedTensor& t = std::get<ShardedTensor>(m);
    return t.global_offset[1] > 0 && t.global_offset[1] + t.local_shape[1] < 1000;
  });
  ASSERT_NE(inner, md[3].end());
  std::get<ShardedTensor>(*inner).local_shape[1] += 1;
  EXPECT_THAT(ValidationError(md), HasSubstr("overlap"));
}

TEST(ValidationTest, ObjectsDuplicateAndMissing) {
  GlobalMetadata md(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    md[rank].push_back(ShardedObject{"ObjB", {}, {1, kWorld}, {0, rank == 3 ? 1 : rank}});
  }
  EXPECT_EQ(ValidationError(md),
            "Invalid sharding pattern validation. Errors: Duplicate ShardedObject keys: "
            "['ObjB/shard_0.1_1.8']");
  std::get<ShardedObject>(md[3][0]).replica_id = {1};  // rank 3's object is a replica now
  EXPECT_EQ(ValidationError(md),
            "Invalid sharding pattern validation. Errors: Invalid access pattern: 1 ShardedObject "
            "are missing. "
            "(key 'ObjB', e.g. ['ObjB/shard_0.3_1.8'])");
}

TEST(ValidationTest, ErrorsOfAllKeysAreReportedTogether) {
  GlobalMetadata md = Uneven1d({{3}, {3}});
  md[1].clear();
  md[0].push_back(ShardedObject{"obj", {}, {2}, {0}});
  md[0].push_back(Meta("mixed", {2}, {}));
  md[1].push_back(ShardedObject{"mixed", {}, {1}, {0}});
  const std::string message = ValidationError(md);
  EXPECT_THAT(message, HasSubstr("Errors: Invalid access pattern for ShardedTensor(key='u'"));
  EXPECT_THAT(
      message,
      HasSubstr("is not covered\nInvalid access pattern: 1 ShardedObject are missing. (key 'obj'"));
  EXPECT_THAT(
      message,
      HasSubstr(
          "\nKey 'mixed' is used by a ShardedTensor on rank 0 and by a ShardedObject on rank 1"));
}

TEST(ValidationTest, EntriesBreakingMetadataRulesAreReported) {
  GlobalMetadata md(1);
  ShardedTensor bad = Meta("bad", {2}, {});
  bad.global_offset = {0, 0};
  md[0].push_back(bad);
  md[0].push_back(ShardedObject{"o", {}, {2}, {0, 0}});
  const std::string message = ValidationError(md);
  EXPECT_THAT(
      message,
      HasSubstr("Errors: Global offset dimensions should be equal to global shape dimensions "
                "for ShardedTensor(key='bad'"));
  EXPECT_THAT(message,
              HasSubstr("\nGlobal offset dimensions should be equal to global shape dimensions for "
                        "ShardedObject(key='o')"));
}

TEST(ValidationTest, CollectLocalMetadataDropsData) {
  Node sd;
  sd["a"]["t"] = Node(ShardedTensor::FromRankOffsets("t", Arange({2}), {}));
  sd["a"]["o"] = Node(ShardedObject{"o", json(5), {1}, {0}});
  sd["common"] = Node(json(1));
  const LocalMetadata md = CollectLocalMetadata(sd);
  ASSERT_EQ(md.size(), 2u);
  EXPECT_EQ(std::get<ShardedObject>(md[0]).key, "o");
  EXPECT_TRUE(std::get<ShardedObject>(md[0]).data.is_null());
  EXPECT_EQ(std::get<ShardedTensor>(md[1]).key, "t");
  EXPECT_FALSE(std::get<ShardedTensor>(md[1]).data.defined());
}

TEST(ValidationTest, LocalMetadataJsonRoundTripKeepsEveryField) {
  ShardedTensor full = ShardedTensor::FromRankOffsetsMeta(
      "t", DType::kBF16, {3, 4}, {{0, 2, 5}, {2, 1, 2}}, {0, 1, 2}, 1, true);
  full.flattened_range = FlatRange{2, 7};
  ShardedTensor uneven = Meta("u", {5}, {});
  uneven.axis_fragmentations.reset();
  const ShardedObject object{"o", {}, {2, 3}, {1, 2}, {0, 4}};
  const LocalMetadata md = {full, uneven, object};
  const json j = LocalMetadataToJson(md);
  const LocalMetadata back = LocalMetadataFromJson(json::parse(j.dump()));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(std::get<ShardedTensor>(back[0]).ToString(), full.ToString());
  EXPECT_EQ(std::get<ShardedTensor>(back[1]).ToString(), uneven.ToString());
  const ShardedObject& o = std::get<ShardedObject>(back[2]);
  EXPECT_EQ(o.UniqueKey(), object.UniqueKey());
  EXPECT_EQ(o.replica_id, object.replica_id);
  EXPECT_THAT(ErrorMessage(ErrorKind::kCorruption,
                           [] { LocalMetadataFromJson(json::parse(R"([{"type": "tensor"}])")); }),
              HasSubstr("Malformed sharded metadata"));
}

TEST(ValidationTest, CommonStateDifferenceMatchesMegatronWarning) {
  Node rank0, mine;
  rank0["rank"] = Node(json(0));
  rank0["lr"] = Node(json(0.1));
  mine["rank"] = Node(json(3));
  mine["lr"] = Node(json(0.1));
  EXPECT_EQ(
      CommonStateDifference(3, rank0, mine),
      "Rank 3 common state dict differs from rank 0 common state dict. Keys only on rank 0: [], "
      "Keys only on 3: [], Mismatched keys: [(('rank',), <class 'int'>, <class 'int'>)]");
  EXPECT_EQ(CommonStateDifference(3, rank0, rank0), "");
  rank0["l"] = Node(List{Node(json(1)), Node(json(2))});
  mine["l"] = Node(List{Node(json(1))});
  mine["extra"] = Node(json("x"));
  EXPECT_EQ(
      CommonStateDifference(5, rank0, mine),
      "Rank 5 common state dict differs from rank 0 common state dict. Keys only on rank 0: [('l', "
      "1)], "
      "Keys only on 5: [('extra',)], Mismatched keys: [(('rank',), <class 'int'>, <class 'int'>)]");
}

}  // namespace
}  // namespace distckpt
