// Ports of Megatron-Core's tests/unit_tests/dist_checkpointing/
// test_flattened_resharding.py (v0.15.3; docs/megatron-semantics.md §5.3 and §9.2
// rows 5, 7, 8): distributed-optimizer style flattened ShardedTensors.
//
// Deliberate differences from Megatron, kept here:
// * the native format stores each rank's flattened range of its chunk as it
//   is and the loader intersects flat ranges directly, so there is no N-D
//   reformulation step on load (row 6, test_reformulate_nd_flattened_tensors,
//   tests that step's internals and has no counterpart);
// * load_tensors_metadata reports a flattened tensor with its original N-d
//   global shape, so loading the metadata gives back an N-d tensor (Megatron:
//   a 1-D one); row 7 compares its flattening with arange;
// * validation errors reach every rank, not only rank 0.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "mapping/dict_utils.h"
#include "mapping/testing.h"
#include "megatron_testutil.h"

namespace distckpt::megatron {
namespace {

using ::testing::ElementsAre;
using TpPp = std::pair<int, int>;

constexpr DType kI64 = DType::kI64;
const Shape kGlobalShape = {8, 5, 40};

// Megatron's TestFlattenedResharding._build_state_dict on `rank` of `topo`:
// the (TP axis 0, PP axis 2) chunk of arange(8*5*40).reshape(8, 5, 40) as
// `unflat` (replica dp_rank) and its flattening split over DP with jittered
// ranges as `flat` (start = n*dp + dp, stop = n*(dp+1) + (dp+1 if dp+1 < DP
// else 0), n = chunk numel // DP). With `garbage` the data is -1 instead
// (Megatron: torch.rand), for load destinations.
Dict FlattenedStateDict(const Topology& topo, int rank, bool garbage) {
  const RankCoords c = topo.Coords(rank);
  const Box chunk{{c.tp * kGlobalShape[0] / topo.tp, 0, c.pp * kGlobalShape[2] / topo.pp},
                  {kGlobalShape[0] / topo.tp, kGlobalShape[1], kGlobalShape[2] / topo.pp}};
  Tensor local = Arange(kGlobalShape).Slice(chunk);
  if (garbage) local = Full(kI64, chunk.shape, -1);
  const int64_t n = local.numel() / topo.dp;
  const FlatRange range{n * c.dp + c.dp, n * (c.dp + 1) + (c.dp + 1 < topo.dp ? c.dp + 1 : 0)};
  const std::vector<RankOffset> offsets = {{0, c.tp, topo.tp}, {2, c.pp, topo.pp}};
  Dict sd;
  sd["sd_key_unflat"] = ShardedTensor::FromRankOffsets("unflat", local, offsets, {c.dp});
  sd["sd_key_flat"] = ShardedTensor::FromRankOffsetsFlat("flat", local.FlatSlice(range),
                                                         chunk.shape, offsets, range);
  return sd;
}

// {state-dict key: data} of a state dict of ShardedTensors (what load returns).
Node DataOf(const Dict& sd) {
  Dict out;
  for (const auto& [key, node] : sd) out[key] = Node(node.as<ShardedTensor>().data);
  return Node(std::move(out));
}

Topology TpDpPp(const TpPp& tp_pp) { return ModelParallel(tp_pp.first, tp_pp.second, "tp-dp-pp"); }

// #5 test_partition_change_save_load: save under src (order tp-dp-pp), load
// into garbage under dest; both tensors must hold dest's arange values.
class MegatronFlattenedPartitionChangeTest
    : public ::testing::TestWithParam<std::tuple<TpPp, TpPp>> {};

TEST_P(MegatronFlattenedPartitionChangeTest, SaveLoad) {
  const Topology src = TpDpPp(std::get<0>(GetParam()));
  const Topology dest = TpDpPp(std::get<1>(GetParam()));
  ScratchDir scratch("flattened_partition_change_save_load");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    Save(Node(FlattenedStateDict(src, comm.rank(), false)), dir, comm);
    LoadResult loaded = Load(Node(FlattenedStateDict(dest, comm.rank(), true)), dir, comm);
    const Node expected = DataOf(FlattenedStateDict(dest, comm.rank(), false));
    const TreeDiff diff = Diff(expected, loaded.state_dict);
    EXPECT_TRUE(diff.empty()) << "rank " << comm.rank() << ": " << diff.mismatch.size()
                              << " mismatching, " << diff.only_left.size() << " missing";
    EXPECT_EQ(ValuesAt(loaded.state_dict, "sd_key_flat"),
              Values(expected.at("sd_key_flat").as<Tensor>()));
  });
}

INSTANTIATE_TEST_SUITE_P(Megatron, MegatronFlattenedPartitionChangeTest,
                         ::testing::Values(std::make_tuple(TpPp{2, 4}, TpPp{2, 4}),
                                           std::make_tuple(TpPp{2, 4}, TpPp{2, 2}),
                                           std::make_tuple(TpPp{2, 4}, TpPp{4, 2}),
                                           std::make_tuple(TpPp{8, 1}, TpPp{1, 2})),
                         [](const ::testing::TestParamInfo<std::tuple<TpPp, TpPp>>& info) {
                           const TpPp& src = std::get<0>(info.param);
                           const TpPp& dest = std::get<1>(info.param);
                           return fmt::format("Tp{}Pp{}ToTp{}Pp{}", src.first, src.second,
                                              dest.first, dest.second);
                         });

// #7 test_load_tensor_metadata: under TP1 PP1, load_tensors_metadata gives
// `flat` and `unflat` the same (original) shapes; loading them (replica ids
// = rank) gives arange, `flat` compared through its flattening.
class MegatronFlattenedMetadataTest : public ::testing::TestWithParam<TpPp> {};

TEST_P(MegatronFlattenedMetadataTest, LoadTensorMetadata) {
  const Topology src = TpDpPp(GetParam());
  ScratchDir scratch("flattened_load_tensor_metadata");
  const std::string dir = scratch.Sub("ckpt");
  const std::vector<double> arange = Values(Arange(kGlobalShape));
  RunRanks(kWorldSize, [&](Communicator& comm) {
    Save(Node(FlattenedStateDict(src, comm.rank(), false)), dir, comm);
    Node metadata = LoadTensorsMetadata(dir);
    EXPECT_EQ(KeysOf(metadata), (std::set<std::string>{"flat", "unflat"}));
    for (auto& [key, node] : metadata.as<Dict>()) {
      ShardedTensor& t = node.as<ShardedTensor>();
      EXPECT_EQ(t.local_shape, kGlobalShape) << key;
      EXPECT_EQ(t.global_shape, kGlobalShape) << key;
      t.replica_id = {comm.rank()};
    }
    LoadResult loaded = Load(metadata, dir, comm);
    EXPECT_EQ(TensorAt(loaded.state_dict, "unflat").shape(), kGlobalShape);
    EXPECT_EQ(ValuesAt(loaded.state_dict, "unflat"), arange);
    EXPECT_EQ(ValuesAt(loaded.state_dict, "flat"), arange);
  });
}

INSTANTIATE_TEST_SUITE_P(Megatron, MegatronFlattenedMetadataTest,
                         ::testing::Values(TpPp{2, 4}, TpPp{8, 1}, TpPp{1, 1}, TpPp{1, 4}),
                         [](const ::testing::TestParamInfo<TpPp>& info) {
                           return fmt::format("Tp{}Pp{}", info.param.first, info.param.second);
                         });

// #8 test_flattened_tensors_are_properly_validated: `flat` is (6, 6) in
// (1, 6) rows; ranks 0, 1, 2 hold the flat ranges [0,1), [1,3), [3,6) of row
// 0 (values = rank) and ranks 3..7 the whole rows 1..5.
Node ValidationStateDict(int rank, int dropping_rank) {
  Dict sd;
  if (rank == dropping_rank) return Node(std::move(sd));
  const int64_t length = rank <= 2 ? rank + 1 : 6;
  const int64_t start = rank == 1 ? 1 : rank == 2 ? 3 : 0;
  sd["sd_key_flat"] = ShardedTensor::FromRankOffsetsFlat("flat", Full(DType::kF32, {length}, rank),
                                                         {1, 6}, {{0, std::max(0, rank - 2), 6}},
                                                         {start, start + length}, {0});
  return Node(std::move(sd));
}

TEST(MegatronFlattenedTest, FlattenedTensorsAreProperlyValidated) {
  ScratchDir scratch("flattened_validation");
  const std::string valid = scratch.Sub("valid");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    Save(ValidationStateDict(comm.rank(), /*dropping_rank=*/-1), valid, comm);
  });
  std::vector<double> expected = {0, 1, 1, 2, 2, 2};  // row 0 from ranks 0, 1, 2
  for (int rank = 3; rank < kWorldSize; ++rank) expected.insert(expected.end(), 6, rank);
  EXPECT_EQ(ValuesAt(LoadPlainTensors(valid), "flat"), expected);

  struct Broken {
    int dropping_rank;
    std::vector<std::string> message;
  };
  const Broken broken[] = {
      // Rank 1 drops its piece of row 0: a gap in the chunk's flattened ranges.
      {1,
       {"Flattened ranges dont cover the whole shard ShardedTensor(key='flat'",
        "of size 6. Ranges: ([0, 3], [1, 6])"}},
      // Rank 4 drops its row: chunk 2 of the (6, 1) grid has no main replica.
      {4,
       {"Invalid access pattern for ShardedTensor(key='flat'",
        "): [[1]\n [1]\n [0]\n [1]\n [1]\n [1]]"}},
  };
  for (const Broken& b : broken) {
    SCOPED_TRACE(fmt::format("rank {} drops its shard", b.dropping_rank));
    const std::string dir = scratch.Sub(fmt::format("without_rank_{}", b.dropping_rank));
    ExpectErrorOnEveryRank(ErrorsOnRanks([&](Communicator& comm) {
                             Save(ValidationStateDict(comm.rank(), b.dropping_rank), dir, comm);
                           }),
                           ErrorKind::kInvalidSharding, b.message);
    EXPECT_THROW(LoadCommonStateDict(dir), CheckpointError);  // nothing was committed
  }
}

}  // namespace
}  // namespace distckpt::megatron
