#include "fsdp/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <tuple>

#include "core/error_testing.h"

namespace distckpt {
namespace {

// docs/fsdp-verl-perf.md §1.1, first worked example.
TEST(MegatronFsdpLayoutTest, WorkedExampleWithConjugateAndFragment) {
  std::vector<Shape> shapes{{2, 6}, {4, 4}, {4, 4}, {1, 2}, {1, 6}};
  MegatronFsdpBucket b = LayoutMegatronFsdpBucket(shapes, 5);
  EXPECT_EQ(b.chunk_size_factor, 12);
  EXPECT_EQ(b.size, 60);
  EXPECT_EQ(b.shard_size(), 12);
  EXPECT_EQ(b.params, (std::vector<FlatRange>{{0, 12}, {12, 28}, {32, 48}, {28, 30}, {48, 54}}));
  auto rows = [&](int p, int r) { return MegatronFsdpRows(b, shapes, p, r); };
  EXPECT_EQ(rows(0, 0), (FlatRange{0, 2}));
  EXPECT_EQ(rows(1, 1), (FlatRange{0, 3}));
  EXPECT_EQ(rows(1, 2), (FlatRange{3, 4}));
  EXPECT_EQ(rows(3, 2), (FlatRange{0, 1}));
  EXPECT_EQ(rows(2, 2), (FlatRange{0, 1}));
  EXPECT_EQ(rows(2, 3), (FlatRange{1, 4}));
  EXPECT_EQ(rows(4, 4), (FlatRange{0, 1}));
  EXPECT_EQ(rows(0, 1).size(), 0);
  EXPECT_EQ(rows(4, 3).size(), 0);
}

// Second worked example: Llama-like shapes on DP=8.
TEST(MegatronFsdpLayoutTest, WorkedExampleLargeShapes) {
  std::vector<Shape> shapes{{4096, 4096}, {11008, 4096}, {4096}};
  MegatronFsdpBucket b = LayoutMegatronFsdpBucket(shapes, 8);
  EXPECT_EQ(b.chunk_size_factor, 4096);
  EXPECT_EQ(b.shard_size(), 7737344);
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 0, 0), (FlatRange{0, 1889}));
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 0, 1), (FlatRange{1889, 3778}));
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 0, 2), (FlatRange{3778, 4096}));
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 1, 2).start, 0);
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 1, 7).stop, 11008);
  EXPECT_EQ(MegatronFsdpRows(b, shapes, 1, 1).size(), 0);
}

TEST(MegatronFsdpLayoutTest, RanksTileEveryParameterWithWholeRows) {
  std::vector<Shape> shapes{{7, 3}, {5, 2}, {3}, {11, 6}, {1, 5}};
  for (int64_t dp : {1, 2, 3, 4, 5, 8, 40}) {
    MegatronFsdpBucket b = LayoutMegatronFsdpBucket(shapes, dp);
    EXPECT_EQ(b.size % (dp * b.chunk_size_factor), 0);
    for (size_t p = 0; p < shapes.size(); ++p) {
      int64_t next = 0;
      for (int64_t r = 0; r < dp; ++r) {
        FlatRange rows = MegatronFsdpRows(b, shapes, static_cast<int>(p), r);
        if (rows.size() == 0) continue;
        EXPECT_EQ(rows.start, next) << "param " << p << " dp " << dp;
        next = rows.stop;
      }
      EXPECT_EQ(next, shapes[p][0]) << "param " << p << " dp " << dp;
    }
  }
}

TEST(Fsdp2LayoutTest, TorchChunkWithEmptyTrailingChunks) {
  EXPECT_EQ(Fsdp2Rows(10, 4, 0), (FlatRange{0, 3}));
  EXPECT_EQ(Fsdp2Rows(10, 4, 3), (FlatRange{9, 10}));
  // More ranks than rows: 3 rows on 5 ranks -> 1, 1, 1, 0, 0.
  EXPECT_EQ(Fsdp2Rows(3, 5, 2), (FlatRange{2, 3}));
  EXPECT_EQ(Fsdp2Rows(3, 5, 3).size(), 0);
  EXPECT_EQ(Fsdp2Rows(3, 5, 4).size(), 0);
  // torch.chunk(5, 4) gives chunks of 2, 2, 1 and no fourth.
  EXPECT_EQ(Fsdp2Rows(5, 4, 2), (FlatRange{4, 5}));
  EXPECT_EQ(Fsdp2Rows(5, 4, 3).size(), 0);
}

TEST(Fsdp2LayoutTest, RowCountsNearInt64MaxAndBadPartsAreHandled) {
  // A DTensor's global size and mesh come from a file: before, rows near
  // 2^63 overflowed (rows + dp - 1) and dp = 0 divided by zero.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Fsdp2Rows(max, 2, 0), (FlatRange{0, max / 2 + 1}));
  EXPECT_EQ(Fsdp2Rows(max, 2, 1), (FlatRange{max / 2 + 1, max}));
  EXPECT_EQ(Fsdp2Rows(max - 1, max, max - 1), (FlatRange{max - 1, max - 1}));
  EXPECT_EQ(Fsdp2Rows(0, 3, 2), (FlatRange{0, 0}));
  for (auto [rows, dp, rank] : {std::tuple{4, 0, 0}, {4, 2, 2}, {4, 2, -1}, {-1, 2, 0}}) {
    EXPECT_THAT([&] { Fsdp2Rows(rows, dp, rank); },
                ThrowsError(ErrorKind::kInvalidArgument, "torch.chunk of"));
  }
}

// Megatron-FSDP's bucket arithmetic on shapes from a file (fsdp-dtensor-export
// reads them from safetensors headers): a row size, the lcm of row sizes,
// dp x chunk or the padded size past 2^63 is refused naming the bucket
// (these were signed overflows); sizes just inside still lay out.
TEST(MegatronFsdpLayoutTest, SizesPastInt64AreRefusedNamingTheBucket) {
  const int64_t big = int64_t{1} << 40;
  const struct {
    std::vector<Shape> shapes;
    int64_t dp;
    const char* what;
  } cases[] = {
      {{{0, big, big}}, 1, "a row's size passes 2^63"},  // no elements, huge rows
      // three primes near 2^31, 2^31 and 2^32: their lcm is about 2^94
      {{{1, 2147483647}, {1, 2147483629}, {1, 4294967291}}, 1, "the chunk size (lcm of row sizes)"},
      {{{1, int64_t{1} << 62}}, 4, "dp x chunk passes 2^63"},
      {{{1, int64_t{1} << 62}, {1, 1}}, 1, "a chunk boundary passes 2^63"},  // 2^62 + 1 -> 2^63
      {{{1, (int64_t{1} << 62) + 1}, {1, (int64_t{1} << 62) + 1}}, 1, "the bucket's size"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT([&] { LayoutMegatronFsdpBucket(c.shapes, c.dp); },
                ThrowsError(ErrorKind::kInvalidArgument, c.what))
        << ShapeToString(c.shapes[0]);
  }
  EXPECT_THAT([&] { LayoutMegatronFsdpBucket(cases[1].shapes, 1); },
              ThrowsError(ErrorKind::kInvalidArgument,
                          "fsdp layout of a bucket of 3 parameters ((1, 2147483647), "
                          "(1, 2147483629), (1, 4294967291)) over dp=1"));
  // Just inside: one row of 2^62 elements over dp=1, and two primes' lcm.
  const MegatronFsdpBucket one = LayoutMegatronFsdpBucket({{1, int64_t{1} << 62}}, 1);
  EXPECT_EQ(one.size, int64_t{1} << 62);
  EXPECT_EQ(MegatronFsdpRows(one, {{1, int64_t{1} << 62}}, 0, 0), (FlatRange{0, 1}));
  const MegatronFsdpBucket two = LayoutMegatronFsdpBucket({{1, 2147483647}, {1, 2147483629}}, 2);
  EXPECT_EQ(two.chunk_size_factor, int64_t{2147483647} * 2147483629);
  EXPECT_EQ(two.size, 2 * two.chunk_size_factor);
  EXPECT_THAT(
      [&] {
        MegatronFsdpRows(two, {{1, 2147483647}, {1, 2147483629}}, 0, 2);
      },
      ThrowsError(ErrorKind::kInvalidArgument, "fsdp layout over dp=2 has no rank 2"));
}

TEST(ShardForFsdpTest, UnevenShardsDropDpFromReplicaId) {
  ShardedTensor w;
  w.key = "w";
  w.global_shape = {6, 10};
  w.local_shape = {6, 5};
  w.global_offset = {0, 5};
  w.axis_fragmentations = Shape{1, 2};
  w.replica_id = {0, 0, 2};
  std::vector<ShardedTensor> out = ShardForFsdp(FsdpLayout::kFsdp2, {w}, FsdpGroup{4, 2, 0});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].local_shape, (Shape{2, 5}));
  EXPECT_EQ(out[0].global_offset, (Shape{4, 5}));
  EXPECT_FALSE(out[0].axis_fragmentations);
  EXPECT_EQ(out[0].replica_id, (ReplicaId{0, 0, 0}));
  EXPECT_EQ(ShardForFsdp(FsdpLayout::kFsdp2, {w}, FsdpGroup{4, 3, 0})[0].local_shape,
            (Shape{0, 5}));
  EXPECT_EQ(ShardForFsdp(FsdpLayout::kNone, {w}, FsdpGroup{4, 3, 0})[0].replica_id,
            (ReplicaId{0, 0, 2}));
}

ShardedTensor Piece(std::string key, Shape global, Shape local, Shape offset, ReplicaId replica) {
  ShardedTensor t;
  t.key = std::move(key);
  t.global_shape = std::move(global);
  t.local_shape = std::move(local);
  t.global_offset = std::move(offset);
  t.replica_id = std::move(replica);
  return t;
}

// A GLU fc1 factory (W rows [0,4), V rows [4,8) of the concatenated local
// tensor) on 3 FSDP2 ranks: chunks of 3 rows, so rank 1 straddles W and V.
TEST(ShardParamsForFsdpTest, FactoryPiecesSplitTheConcatenatedRows) {
  FsdpParam fc1{{Piece("fc1", {8, 2}, {4, 2}, {0, 0}, {0, 0, 1}),
                 Piece("fc1", {8, 2}, {4, 2}, {4, 0}, {0, 0, 1})}};
  auto at = [&](int64_t rank) {
    return ShardParamsForFsdp(FsdpLayout::kFsdp2, {fc1}, {3, rank, 0}, {3, rank, 0}).at(0);
  };
  EXPECT_EQ(at(0)[0].local_shape, (Shape{3, 2}));
  EXPECT_EQ(at(0)[1].local_shape, (Shape{0, 2}));
  EXPECT_EQ(at(1)[0].local_shape, (Shape{1, 2}));
  EXPECT_EQ(at(1)[0].global_offset, (Shape{3, 0}));
  EXPECT_EQ(at(1)[1].local_shape, (Shape{2, 2}));
  EXPECT_EQ(at(1)[1].global_offset, (Shape{4, 0}));
  EXPECT_EQ(at(2)[0].local_shape, (Shape{0, 2}));
  EXPECT_EQ(at(2)[1].local_shape, (Shape{2, 2}));
  EXPECT_EQ(at(2)[1].global_offset, (Shape{6, 0}));
  EXPECT_EQ(at(2)[1].replica_id, (ReplicaId{0, 0, 0}));
}

// Megatron-FSDP buckets per (dtype, expert, unit): an expert parameter is
// laid out over the expert group alone, and HSDP's replica goes into the id.
TEST(ShardParamsForFsdpTest, ExpertBucketsAndHsdpReplica) {
  FsdpParam dense{{Piece("d", {4, 3}, {4, 3}, {0, 0}, {0, 0, 3})}};
  FsdpParam expert{{Piece("e", {2, 6}, {2, 6}, {0, 0}, {0, 0, 1})}, -1, true};
  auto out = ShardParamsForFsdp(FsdpLayout::kMegatron, {dense, expert}, {2, 1, 1}, {2, 0, 0});
  // dense alone: chunk 3, bucket 12 -> rank 1 holds rows [2,4).
  EXPECT_EQ(out[0][0].local_shape, (Shape{2, 3}));
  EXPECT_EQ(out[0][0].global_offset, (Shape{2, 0}));
  EXPECT_EQ(out[0][0].replica_id, (ReplicaId{0, 0, 1}));
  // expert alone: chunk 6, bucket 12 -> expert rank 0 holds row 0.
  EXPECT_EQ(out[1][0].local_shape, (Shape{1, 6}));
  EXPECT_EQ(out[1][0].replica_id, (ReplicaId{0, 0, 0}));
}

TEST(FsdpGroupTest, HsdpShardsInsideReplicas) {
  Topology t = Topology::Parse("tp=2,dp=6,dp_shard=3");
  // rank 2*dp + tp: dp coordinate 4 -> replica 1, shard rank 1.
  FsdpGroup g = DenseFsdpGroup(t, 9);
  EXPECT_EQ(g.size, 3);
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.replica, 1);
  FsdpGroup plain = DenseFsdpGroup(Topology::Parse("dp=2,cp=2"), 3);
  EXPECT_EQ(plain.size, 4);
  EXPECT_EQ(plain.rank, 3);
  EXPECT_EQ(plain.replica, 0);
  EXPECT_THAT([] { ExpertFsdpGroup(Topology::Parse("dp=4,dp_shard=2,ep=2"), 0); },
              ThrowsError(ErrorKind::kUnsupported, "topology dp_shard"));
}

TEST(FsdpLayoutTest, RefusesBadInput) {
  EXPECT_THAT([] { LayoutMegatronFsdpBucket({{4}}, 0); },
              ThrowsError(ErrorKind::kInvalidArgument, "dp >= 1"));
  EXPECT_THAT([] { LayoutMegatronFsdpBucket({{}}, 2); },
              ThrowsError(ErrorKind::kInvalidArgument, "0-d"));
  EXPECT_THAT([] { ParseFsdpLayout("fsdp1"); },
              ThrowsError(ErrorKind::kInvalidArgument, "unknown fsdp layout"));
}

}  // namespace
}  // namespace distckpt
