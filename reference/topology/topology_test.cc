#include "topology/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/error_testing.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TopologyTest, ParsesSizesWithDefaults) {
  Topology t = Topology::Parse("tp=2,pp=4,dp=2");
  EXPECT_EQ(t.tp, 2);
  EXPECT_EQ(t.pp, 4);
  EXPECT_EQ(t.dp, 2);
  EXPECT_EQ(t.cp, 1);
  EXPECT_EQ(t.ep, 1);
  EXPECT_EQ(t.vpp, 1);
  EXPECT_EQ(t.world_size(), 16);
  EXPECT_EQ(t.ToString(), "tp=2,dp=2,pp=4");
  EXPECT_EQ(Topology::Parse(t.ToString()), t);
}

TEST(TopologyTest, DefaultOrderTpFastest) {
  // Megatron: TP=2, PP=4 => rank = tp + 2*pp (docs/megatron-semantics.md §0.1).
  Topology t = Topology::Parse("tp=2,pp=4");
  for (int rank = 0; rank < 8; ++rank) {
    RankCoords c = t.Coords(rank);
    EXPECT_EQ(c.tp, rank % 2);
    EXPECT_EQ(c.pp, rank / 2);
    EXPECT_EQ(t.RankOf(c), rank);
  }
  // TP=1, PP=2, DP=4 => rank = dp + 4*pp.
  Topology u = Topology::Parse("pp=2,dp=4");
  EXPECT_EQ(u.Coords(5).dp, 1);
  EXPECT_EQ(u.Coords(5).pp, 1);
}

TEST(TopologyTest, CustomOrder) {
  Topology t = Topology::Parse("tp=2,pp=2,dp=2,order=tp-pp-dp");
  RankCoords c = t.Coords(2);  // tp fastest, then pp, then dp
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(t.Coords(4).dp, 1);
  EXPECT_EQ(t.ToString(), "tp=2,dp=2,pp=2,order=tp-pp-dp-cp");
  EXPECT_EQ(Topology::Parse(t.ToString()), t);
}

TEST(TopologyTest, ExpertView) {
  Topology t = Topology::Parse("tp=1,dp=4,ep=2");
  EXPECT_EQ(t.edp(), 2);
  EXPECT_EQ(t.Coords(0).ep, 0);
  EXPECT_EQ(t.Coords(1).ep, 1);
  EXPECT_EQ(t.Coords(2).ep, 0);
  EXPECT_EQ(t.Coords(3).edp, 1);
  EXPECT_THAT(t.Group(0, MeshDim::kEp), ElementsAre(0, 1));
  EXPECT_THAT(t.Group(1, MeshDim::kEdp), ElementsAre(1, 3));
}

TEST(TopologyTest, Groups) {
  Topology t = Topology::Parse("tp=2,dp=2,pp=2");
  EXPECT_THAT(t.Group(0, MeshDim::kDp), ElementsAre(0, 2));
  EXPECT_THAT(t.Group(3, MeshDim::kTp), ElementsAre(2, 3));
  EXPECT_THAT(t.Group(1, MeshDim::kPp), ElementsAre(1, 5));
}

TEST(TopologyTest, RejectsBadInput) {
  for (const char* bad :
       {"tp=0", "tp=x", "tp=2,tp=2", "zz=1", "tp", "dp=3,ep=2", "tp=2,,pp=2", "order=tp-foo", ""}) {
    EXPECT_THROW(Topology::Parse(bad), CheckpointError) << bad;
  }
  try {
    Topology::Parse("dp=3,ep=2");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("ep=2 must divide dp*cp=3"));
  }
}

// Issue 15 defect 6: world = tp*cp*dp*pp was computed in int.
TEST(TopologyTest, RefusesWorldsWhoseSizeOverflows) {
  for (const char* huge :
       {"tp=4,pp=1073741825", "tp=65536,pp=65536", "tp=2147483647,dp=2",
        "tp=1024,cp=1024,dp=1024,pp=1024", "tp=2097152", "pp=2,vpp=1073741824"}) {
    EXPECT_THAT([&] { Topology::Parse(huge); },
                ThrowsError(ErrorKind::kInvalidArgument, "exceeds the largest supported"))
        << huge;
  }
  EXPECT_EQ(Topology::Parse("tp=1024,pp=1024").world_size(), 1 << 20);
}

// Issue 39: a trailing (or doubled) comma is an empty field, not ignored.
TEST(TopologyTest, RefusesEmptyFields) {
  for (const char* text : {"tp=2,", "tp=2,,pp=2", ",tp=2", "tp=2, ", ""}) {
    EXPECT_THAT([&] { Topology::Parse(text); },
                ThrowsError(ErrorKind::kInvalidArgument, "empty field"))
        << text;
  }
}

}  // namespace
}  // namespace distckpt

namespace distckpt {
namespace {

TEST(TopologyTest, HsdpSplit) {
  Topology t = Topology::Parse("dp=8,dp_shard=4");
  EXPECT_EQ(t.dp_shard_size(), 4);
  EXPECT_EQ(t.dp_replicate(), 2);
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.ToString(), "dp=8,dp_shard=4");
  EXPECT_EQ(Topology::Parse(t.ToString()), t);
  // dp_shard == dp is plain FSDP: the same topology as without it.
  EXPECT_EQ(Topology::Parse("dp=4,dp_shard=4"), Topology::Parse("dp=4"));
  EXPECT_EQ(Topology::Parse("dp=4").dp_shard_size(), 4);
  EXPECT_EQ(Topology::Parse("dp=4").dp_replicate(), 1);
  try {
    Topology::Parse("dp=6,dp_shard=4");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dp_shard=4 must divide dp=6"));
  }
  EXPECT_THROW(Topology::Parse("dp=4,dp_shard=0"), CheckpointError);
}

}  // namespace
}  // namespace distckpt
