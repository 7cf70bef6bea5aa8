// Ports of Megatron-Core's tests/unit_tests/dist_checkpointing/test_serialization.py
// (v0.15.3; docs/megatron-semantics.md §9.2 rows 53-61, 63 and 71; 64-65 in
// megatron_metadata_test.cc, 66-67 in megatron_uneven_test.cc) to the engine
// API, with Megatron's world of 8 ranks as threads and Megatron's values.
// Row 62 (remove_sharded_tensors with separation_hint) has no API here.
//
// Deliberate differences from Megatron, kept here:
// * validation and strict errors reach every rank, not only rank 0;
// * objects and common state are JSON (Megatron: pickled Python objects);
// * load_tensors_metadata reports flattened tensors with their N-d shape.
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

namespace fs = std::filesystem;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr DType kF32 = DType::kF32;
constexpr DType kI64 = DType::kI64;

// #53 test_single_process_save_load: TP1 PP1; every rank saves keyA / keyB
// (replica_id = rank) and loads only keyA under another state-dict key.
// (Megatron's extra DTensor key has no counterpart here.)
TEST(MegatronSerializationTest, SingleProcessSaveLoad) {
  ScratchDir scratch("single_process_save_load");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int64_t rank = comm.rank();
    Dict sd;
    sd["sd_keyA"] = ShardedTensor::FromRankOffsets("keyA", Full(kF32, {2, 4}, 1), {}, {rank});
    sd["sd_keyB"] = ShardedTensor::FromRankOffsets("keyB", Full(kF32, {3, 5, 7}, 1), {}, {rank});
    Save(Node(sd), dir, comm);

    Dict request;
    request["load_sd_keyA"] =
        ShardedTensor::FromRankOffsets("keyA", Tensor::Zeros(kF32, {2, 4}), {}, {rank});
    LoadResult loaded = Load(Node(request), dir, comm);
    EXPECT_EQ(KeysOf(loaded.state_dict), std::set<std::string>{"load_sd_keyA"});
    EXPECT_EQ(TensorAt(loaded.state_dict, "load_sd_keyA").shape(), (Shape{2, 4}));
    EXPECT_THAT(ValuesAt(loaded.state_dict, "load_sd_keyA"), Each(1.0));
  });
}

// The common-state consistency warning of #54 / #55 (docs/megatron-semantics.md §2.2).
std::string RankDiffersWarning(int rank) {
  return fmt::format(
      "Rank {} common state dict differs from rank 0 common state dict. Keys only on rank 0: [], "
      "Keys only on {}: [], Mismatched keys: [(('rank',), <class 'int'>, <class 'int'>)]",
      rank, rank);
}

// keyA (2, 4) split on axis 0 and keyB (3, 5, 7) split on axis 2 over all
// ranks, plus the common value `rank` (different on every rank).
Dict KeyAKeyBState(int rank) {
  Dict sd;
  sd["sd_keyA"] =
      ShardedTensor::FromRankOffsets("keyA", Full(kF32, {2, 4}, 1), {{0, rank, kWorldSize}});
  sd["sd_keyB"] =
      ShardedTensor::FromRankOffsets("keyB", Full(kF32, {3, 5, 7}, 1), {{2, rank, kWorldSize}});
  sd["rank"] = Node(nlohmann::json(rank));
  return sd;
}

// #54 test_multi_process_save: TP2 PP4, validated save of keyA / keyB with
// common values. SaveOptions has no preprocess_common_before_consistancy_check
// (Megatron's test deletes `rank` with it before the consistency check), so
// ranks > 0 get #55's warning here; a warning never fails a save in either.
TEST(MegatronSerializationTest, MultiProcessSave) {
  ScratchDir scratch("multi_process_save");
  const std::string dir = scratch.Sub("ckpt");
  ModelParallel(2, 4);  // Megatron initializes TP2 PP4; only the world size matters
  RunRanks(kWorldSize, [&](Communicator& comm) {
    Dict sd = KeyAKeyBState(comm.rank());
    sd["lr"] = Node(nlohmann::json(0.01));
    SaveOptions options;
    options.validate_access_integrity = true;
    Save(Node(sd), dir, comm, options);
  });
  Node metadata = LoadTensorsMetadata(dir);
  EXPECT_EQ(KeysOf(metadata), (std::set<std::string>{"keyA", "keyB"}));
  EXPECT_EQ(metadata.at("keyA").as<ShardedTensor>().global_shape, (Shape{16, 4}));
  EXPECT_EQ(metadata.at("keyB").as<ShardedTensor>().global_shape, (Shape{3, 5, 56}));
  Node common = LoadCommonStateDict(dir);  // rank 0's common state
  EXPECT_EQ(KeysOf(common), (std::set<std::string>{"lr", "rank"}));
  EXPECT_EQ(JsonAt(common, "lr"), nlohmann::json(0.01));
  EXPECT_EQ(JsonAt(common, "rank"), nlohmann::json(0));
}

// #55 test_multi_process_save_log_difference: the common value `rank`
// differs, so every rank > 0 reports Megatron's exact warning text (in
// SaveSummary.warnings instead of the log) and rank 0 none.
TEST(MegatronSerializationTest, MultiProcessSaveLogDifference) {
  ScratchDir scratch("multi_process_save_log_difference");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    SaveOptions options;
    options.validate_access_integrity = true;
    SaveSummary summary = Save(Node(KeyAKeyBState(comm.rank())), dir, comm, options);
    if (comm.rank() == 0) {
      EXPECT_THAT(summary.warnings, IsEmpty());
    } else {
      EXPECT_THAT(summary.warnings, ElementsAre(RankDiffersWarning(comm.rank())))
          << "rank " << comm.rank();
    }
  });
}

// keyB of #56: global (4, 5, 80) holding 100x + z at (x, y, z).
double KeyBValue(int64_t x, int64_t z) { return 100.0 * x + z; }

// #56 test_partition_change_save_load: save under TP2 PP4, load unsharded,
// then load under TP1 PP2 (DP4) with a prepended axis for keyB.
TEST(MegatronSerializationTest, PartitionChangeSaveLoad) {
  ScratchDir scratch("partition_change_save_load");
  const std::string dir = scratch.Sub("ckpt");
  const Topology save_topo = ModelParallel(2, 4);
  const Topology load_topo = ModelParallel(1, 2);
  const std::vector<double> ten_a_global = {0, 1, 2, 3, 10, 11, 12, 13};  // (2, 4)
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    const RankCoords c = save_topo.Coords(rank);
    Tensor ten_a = Full(kF32, {1, 1}, 10 * c.tp + c.pp);
    Tensor ten_b = Tensor::Empty(kF32, {4, 5, 10});
    for (int64_t i = 0; i < ten_b.numel(); ++i) {
      const int64_t x = i / 50, z = i % 10;
      ten_b.data_as<float>()[i] = static_cast<float>(KeyBValue(x, 10 * rank + z));
    }
    Dict sd;
    sd["sd_keyA"] = ShardedTensor::FromRankOffsets(
        "keyA", ten_a, {{0, c.tp, save_topo.tp}, {1, c.pp, save_topo.pp}}, {0});
    sd["sd_keyB"] = ShardedTensor::FromRankOffsets("keyB", ten_b, {{2, rank, kWorldSize}});
    EXPECT_EQ(sd["sd_keyA"].as<ShardedTensor>().local_shape, (Shape{1, 1}));
    EXPECT_EQ(sd["sd_keyA"].as<ShardedTensor>().global_shape, (Shape{2, 4}));
    EXPECT_EQ(sd["sd_keyB"].as<ShardedTensor>().global_shape, (Shape{4, 5, 80}));
    Save(Node(sd), dir, comm);

    // Same TPxPP, no sharding: every rank loads both whole tensors.
    Dict whole;
    whole["sd_keyA"] = ShardedTensor::FromRankOffsets("keyA", Full(kF32, {2, 4}, -1), {}, {rank});
    whole["sd_keyB"] =
        ShardedTensor::FromRankOffsets("keyB", Full(kF32, {4, 5, 80}, -1), {}, {rank});
    LoadResult loaded = Load(Node(whole), dir, comm);
    std::vector<double> ten_b_global;
    for (int64_t i = 0; i < 4 * 5 * 80; ++i) ten_b_global.push_back(KeyBValue(i / 400, i % 80));
    EXPECT_EQ(TensorAt(loaded.state_dict, "sd_keyA").shape(), (Shape{2, 4}));
    EXPECT_EQ(ValuesAt(loaded.state_dict, "sd_keyA"), ten_a_global);
    EXPECT_EQ(TensorAt(loaded.state_dict, "sd_keyB").shape(), (Shape{4, 5, 80}));
    EXPECT_EQ(ValuesAt(loaded.state_dict, "sd_keyB"), ten_b_global);

    // TP1 PP2: keyA column dp_rank (replicated over PP); keyB rows of block
    // rank // 2 along the prepended axis (replicated over pairs of ranks).
    const RankCoords d = load_topo.Coords(rank);
    Dict changed;
    changed["sd_keyA"] = ShardedTensor::FromRankOffsets("keyA", Full(kF32, {2, 1}, -1),
                                                        {{1, d.dp, load_topo.dp}}, {d.pp});
    changed["sd_keyB"] = ShardedTensor::FromRankOffsets("keyB", Full(kF32, {5, 80}, -1),
                                                        {{0, rank / 2, 4}}, {rank % 2},
                                                        /*prepend_axis_num=*/1);
    loaded = Load(Node(changed), dir, comm);
    std::vector<double> ten_b_rows;  // arange(80) + 100 * (rank // 2), five times
    for (int64_t i = 0; i < 5 * 80; ++i) ten_b_rows.push_back(KeyBValue(rank / 2, i % 80));
    EXPECT_EQ(TensorAt(loaded.state_dict, "sd_keyA").shape(), (Shape{2, 1}));
    EXPECT_THAT(ValuesAt(loaded.state_dict, "sd_keyA"),
                ElementsAre(ten_a_global[d.dp], ten_a_global[4 + d.dp]));
    EXPECT_EQ(TensorAt(loaded.state_dict, "sd_keyB").shape(), (Shape{5, 80}));
    EXPECT_EQ(ValuesAt(loaded.state_dict, "sd_keyB"), ten_b_rows) << "rank " << rank;
  });
}

// #57 test_load_tensors_metadata: metadata keyed by tensor key, unsharded,
// loadable (without access validation: every rank requests replica 0).
TEST(MegatronSerializationTest, LoadTensorsMetadata) {
  ScratchDir scratch("load_tensors_metadata");
  const std::string dir = scratch.Sub("ckpt");
  ModelParallel(2, 4);  // Megatron initializes TP2 PP4; only the world size matters
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    Dict sd;
    sd["sd_keyA"] = ShardedTensor::FromRankOffsets("keyA", Arange({10}, 10 * rank, kI64),
                                                   {{0, rank, kWorldSize}});
    sd["sd_keyB"] =
        ShardedTensor::FromRankOffsets("keyB", Full(kF32, {3, 5, 7}, 1), {{2, rank, kWorldSize}});
    Save(Node(sd), dir, comm);

    Node metadata = LoadTensorsMetadata(dir);
    EXPECT_EQ(KeysOf(metadata), (std::set<std::string>{"keyA", "keyB"}));
    const ShardedTensor& a = metadata.at("keyA").as<ShardedTensor>();
    const ShardedTensor& b = metadata.at("keyB").as<ShardedTensor>();
    EXPECT_EQ(a.global_shape, (Shape{10 * kWorldSize}));
    EXPECT_EQ(b.global_shape, (Shape{3, 5, 7 * kWorldSize}));
    EXPECT_EQ(a.local_shape, a.global_shape);
    EXPECT_EQ(b.local_shape, b.global_shape);
    EXPECT_EQ(a.global_offset, (Shape{0}));
    EXPECT_EQ(b.global_offset, (Shape{0, 0, 0}));
    EXPECT_EQ(a.axis_fragmentations, (Shape{1}));
    EXPECT_EQ(b.axis_fragmentations, (Shape{1, 1, 1}));
    EXPECT_EQ(a.replica_id, (ReplicaId{0}));
    EXPECT_EQ(b.replica_id, (ReplicaId{0}));
    EXPECT_EQ(a.dtype, kI64);
    EXPECT_EQ(b.dtype, kF32);
    EXPECT_FALSE(a.data.defined());

    LoadOptions options;
    options.validate_access_integrity = false;
    LoadResult loaded = Load(metadata, dir, comm, options);
    EXPECT_EQ(ValuesAt(loaded.state_dict, "keyA"), Values(Arange({10 * kWorldSize})));
    EXPECT_EQ(TensorAt(loaded.state_dict, "keyB").shape(), (Shape{3, 5, 56}));
    EXPECT_THAT(ValuesAt(loaded.state_dict, "keyB"), Each(1.0));
  });
}

// #58 test_can_mix_sharded_tensors_and_factories: a list of three tensors and
// a factory building three parts merged by sum; saved from base 0, loaded
// into buffers of base 10.
Node MixedStateDict(int rank, int64_t base) {
  ShardedTensorFactory factory;
  factory.key = "D";
  factory.data = Arange({5}, base);
  factory.replica_id = {rank};
  factory.build_fn = [](const std::string& key, const Tensor& data, const ReplicaId& replica_id,
                        const std::optional<FlatRange>& flattened_range) {
    EXPECT_FALSE(flattened_range.has_value());
    List parts;
    for (const char* part : {"part1", "part2", "part3"}) {
      parts.push_back(
          Node(ShardedTensor::FromRankOffsets(key + part, data.Clone(), {}, replica_id)));
    }
    return Node(std::move(parts));
  };
  factory.merge_fn = [](const Node& loaded) {  // Python's sum()
    Tensor total = Tensor::Zeros(kI64, {5});
    for (const Node& part : loaded.as<List>()) {
      for (int64_t i = 0; i < 5; ++i)
        total.data_as<int64_t>()[i] += part.as<Tensor>().data_as<int64_t>()[i];
    }
    return total;
  };
  List all;
  all.push_back(Node(ShardedTensor::FromRankOffsets("A", Arange({2}, base), {}, {rank})));
  all.push_back(Node(ShardedTensor::FromRankOffsets("B", Arange({3}, base), {}, {rank})));
  all.push_back(Node(ShardedTensor::FromRankOffsets("C", Arange({4}, base), {}, {rank})));
  all.push_back(Node(std::move(factory)));
  Dict sd;
  sd["all"] = Node(std::move(all));
  return Node(std::move(sd));
}

TEST(MegatronSerializationTest, CanMixShardedTensorsAndFactories) {
  ScratchDir scratch("mix_sharded_tensors_and_factories");
  const std::string dir = scratch.Sub("ckpt");
  Tensor d_expected = Arange({5});
  for (int64_t i = 0; i < 5; ++i) d_expected.data_as<int64_t>()[i] *= 3;
  Dict expected;
  expected["all"] =
      Node(List{Node(Arange({2})), Node(Arange({3})), Node(Arange({4})), Node(d_expected)});
  RunRanks(kWorldSize, [&](Communicator& comm) {
    Save(MixedStateDict(comm.rank(), 0), dir, comm);
    LoadResult loaded = Load(MixedStateDict(comm.rank(), 10), dir, comm);
    TreeDiff diff = Diff(loaded.state_dict, Node(expected));
    EXPECT_TRUE(diff.empty()) << "rank " << comm.rank() << ": " << NodeToString(loaded.state_dict);
  });
}

// #59 test_load_error_msg: a missing directory, an empty directory and a key
// renamed after the save each fail on every rank with a message naming it.
TEST(MegatronSerializationTest, LoadErrorMsg) {
  ScratchDir scratch("load_error_msg");
  const std::string non_existent = scratch.Sub("non-existent-path/test_load_error_msg");
  const std::string dir = scratch.Sub("test_load_error_msg");
  auto state = [](int rank, const std::string& key) {
    Dict sd;
    sd["some_key"] = ShardedTensor::FromRankOffsets(key, Arange({10}, 0, kF32), {}, {rank});
    return Node(std::move(sd));
  };

  ExpectErrorOnEveryRank(ErrorsOnRanks([&](Communicator& comm) {
                           Load(state(comm.rank(), "keyA"), non_existent, comm);
                         }),
                         ErrorKind::kIncomplete,
                         {fmt::format("directory {} does not exist", non_existent)});

  fs::create_directories(dir);
  ExpectErrorOnEveryRank(
      ErrorsOnRanks([&](Communicator& comm) { Load(state(comm.rank(), "keyA"), dir, comm); }),
      ErrorKind::kIncomplete, {"is not a distributed checkpoint"});

  RunRanks(kWorldSize, [&](Communicator& comm) { Save(state(comm.rank(), "keyA"), dir, comm); });
  // Megatron: DCP's KeyError text, wrapped in a CheckpointException.
  ExpectErrorOnEveryRank(ErrorsOnRanks([&](Communicator& comm) {
                           Load(state(comm.rank(), "different_key"), dir, comm);
                         }),
                         ErrorKind::kKeyMismatch,
                         {"different_key from model not in state dict: [keyA]"});
}

// #60 test_sharded_object_serialization: a ShardedObject comes back with the
// saved value under the request's state-dict key, whatever the request held.
TEST(MegatronSerializationTest, ShardedObjectSerialization) {
  ScratchDir scratch("sh_obj");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int64_t rank = comm.rank();
    Dict sd;
    sd["some_key"] = ShardedObject{"sh_obj_A", {{"some", "dict"}}, {1}, {0}, {rank}};
    Save(Node(sd), dir, comm);
    Dict request;
    request["other_key"] = ShardedObject{"sh_obj_A", {{"other", "dictionary"}}, {1}, {0}, {rank}};
    LoadResult loaded = Load(Node(request), dir, comm);
    EXPECT_EQ(KeysOf(loaded.state_dict), std::set<std::string>{"other_key"});
    EXPECT_EQ(JsonAt(loaded.state_dict, "other_key"), (nlohmann::json{{"some", "dict"}}));
  });
}

// #61 test_tensor_shape_mismatch: global (2, 32) = range(32) twice, saved
// rigid (keyA) and flexible (keyB, allow_shape_mismatch) from (2, 4) pieces;
// loaded PP-sharded as (2, 7) pieces (28 < 32) and (2, 9) pieces (36 > 32)
// into float ones: rigid raises, flexible trims or zero-fills.
TEST(MegatronSerializationTest, TensorShapeMismatch) {
  ScratchDir scratch("tensor_shape_mismatch");
  const std::string dir = scratch.Sub("ckpt");
  const Topology topo = ModelParallel(2, 4);
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    Tensor local = Tensor::Empty(kI64, {2, 4});
    for (int64_t i = 0; i < 8; ++i) local.data_as<int64_t>()[i] = i % 4 + 4 * rank;
    Dict sd;
    sd["rigid"] = ShardedTensor::FromRankOffsets("keyA", local, {{1, rank, kWorldSize}});
    sd["flexible"] = ShardedTensor::FromRankOffsets("keyB", local, {{1, rank, kWorldSize}}, {0}, 0,
                                                    /*allow_shape_mismatch=*/true);
    EXPECT_EQ(sd["rigid"].as<ShardedTensor>().global_shape, (Shape{2, 32}));
    EXPECT_EQ(sd["flexible"].as<ShardedTensor>().global_shape, (Shape{2, 32}));
    Save(Node(sd), dir, comm);
  });

  for (int64_t width : {7, 9}) {
    SCOPED_TRACE(fmt::format("pieces of (2, {})", width));
    auto request = [&](int rank, const char* sd_key, const char* key, bool flexible) {
      const RankCoords c = topo.Coords(rank);
      Dict sd;
      sd[sd_key] = ShardedTensor::FromRankOffsets(key, Full(kF32, {2, width}, 1),
                                                  {{1, c.pp, topo.pp}}, {c.tp}, 0, flexible);
      return Node(std::move(sd));
    };
    ExpectErrorOnEveryRank(ErrorsOnRanks([&](Communicator& comm) {
                             Load(request(comm.rank(), "rigid", "keyA", false), dir, comm);
                           }),
                           ErrorKind::kShapeMismatch, {"Global shape mismatch"});
    RunRanks(kWorldSize, [&](Communicator& comm) {
      const int64_t pp = topo.Coords(comm.rank()).pp;
      LoadResult loaded = Load(request(comm.rank(), "flexible", "keyB", true), dir, comm);
      std::vector<double> expected;
      for (int64_t i = 0; i < 2 * width; ++i) {
        const int64_t column = i % width + pp * width;
        expected.push_back(column < 32 ? column : 0);  // beyond the stored 32: zeros
      }
      EXPECT_EQ(ValuesAt(loaded.state_dict, "flexible"), expected) << "pp " << pp;
    });
  }
}

// #63 test_empty_load: ranks 0-2 hold only common values, ranks 3-7 one
// ShardedTensor `x` each (rank 3 its main replica). The result is the
// checkpoint's common state (rank 0's) plus the loaded shards; common values
// only in the request are dropped.
TEST(MegatronSerializationTest, EmptyLoad) {
  ScratchDir scratch("empty_load");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int64_t rank = comm.rank();
    Dict sd;
    if (rank == 0) {
      sd["common"] = Node(nlohmann::json("common-value"));
    } else if (rank == 1) {
      sd["a"] = Node(nlohmann::json(3));  // not saved at all (rank 0 saves the common state)
    } else if (rank == 2) {
      sd["b"] = Node(nlohmann::json(3));
    } else {
      sd["a"] = ShardedTensor::FromRankOffsets("x", Full(kF32, {2}, rank), {}, {rank - 3});
    }
    Save(Node(sd), dir, comm);
    LoadResult loaded = Load(Node(sd), dir, comm);
    EXPECT_EQ(JsonAt(loaded.state_dict, "common"), nlohmann::json("common-value"));
    if (rank <= 2) {
      EXPECT_EQ(KeysOf(loaded.state_dict), std::set<std::string>{"common"});
    } else {
      EXPECT_EQ(KeysOf(loaded.state_dict), (std::set<std::string>{"a", "common"}));
      // Megatron's test compares without asserting (§12); we assert.
      EXPECT_THAT(ValuesAt(loaded.state_dict, "a"), ElementsAre(3, 3)) << "rank " << rank;
    }
  });
}

}  // namespace
}  // namespace distckpt::megatron
