// Ports of Megatron-Core's test_serialization.py metadata tests (v0.15.3;
// docs/megatron-semantics.md §9.2 rows 64-65 and test_sharded_metadata) to the engine
// API, with Megatron's world of 8 ranks as threads.
//
// Deliberate difference from Megatron, kept here: ShardedObject unique keys
// may contain '/'.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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

using ::testing::ElementsAre;

constexpr DType kF32 = DType::kF32;
// #64 / #65 test_content_metadata_load_from_checkpoint / _from_state_dict:
// SaveOptions.content_metadata comes back as the common state's
// "content_metadata", from the directory and from a load. (Megatron's tuple
// (5, {6: None}) is the JSON array [5, {"6": null}].)
class MegatronContentMetadataTest : public ::testing::TestWithParam<const char*> {};

TEST_P(MegatronContentMetadataTest, LoadFromCheckpointAndFromStateDict) {
  const nlohmann::json content = nlohmann::json::parse(GetParam());
  ScratchDir scratch("content_metadata");
  const std::string dir = scratch.Sub("ckpt");
  auto state = [](int64_t rank) {
    Dict sd;
    sd["sd_keyA"] = ShardedTensor::FromRankOffsets("keyA", Full(kF32, {2}, 1), {}, {rank});
    sd["common"] = Node(nlohmann::json::array({3, 5, 7}));
    return Node(std::move(sd));
  };
  RunRanks(kWorldSize, [&](Communicator& comm) {
    SaveOptions options;
    options.content_metadata = content;
    Save(state(comm.rank()), dir, comm, options);
    LoadResult loaded = Load(state(comm.rank()), dir, comm);
    EXPECT_EQ(KeysOf(loaded.state_dict),
              (std::set<std::string>{"common", "content_metadata", "sd_keyA"}));
    if (KeysOf(loaded.state_dict).count("content_metadata")) {
      EXPECT_EQ(CommonToJson(loaded.state_dict.at("content_metadata")), content);
    }
  });
  EXPECT_EQ(CommonToJson(LoadCommonStateDict(dir).at("content_metadata")), content);
}

INSTANTIATE_TEST_SUITE_P(Megatron, MegatronContentMetadataTest,
                         ::testing::Values(R"({"a": 3})",
                                           R"({"nested": {"a": 3}, "flat": [5, {"6": null}]})",
                                           "{}"));

TEST(MegatronSerializationTest, ShardedMetadata) {
  ScratchDir scratch("sharded_metadata");
  const std::string dir = scratch.Sub("ckpt");
  ModelParallel(2, 4);  // Megatron initializes TP2 PP4; only the world size matters
  RunRanks(kWorldSize,
           [&](Communicator& comm) { Save(Node(NonStrictBaseStateDict(comm.rank())), dir, comm); });
  Node metadata = LoadShardedMetadata(dir);
  std::set<std::string> expected_keys = {"TenA", "TenB", "TenC", "ObjA/shard_0_1"};
  for (int i = 0; i < kWorldSize; ++i) expected_keys.insert(fmt::format("ObjB/shard_0.{}_1.8", i));
  EXPECT_EQ(KeysOf(metadata), expected_keys);
  std::set<std::string> base_keys;
  for (const auto& [key, node] : metadata.as<Dict>()) {
    if (const ShardedTensor* t = node.get_if<ShardedTensor>()) base_keys.insert(t->key);
    if (const ShardedObject* o = node.get_if<ShardedObject>()) base_keys.insert(o->key);
  }
  EXPECT_EQ(base_keys, (std::set<std::string>{"TenA", "TenB", "TenC", "ObjA", "ObjB"}));

  RunRanks(kWorldSize, [&](Communicator& comm) {
    LoadOptions options;
    options.validate_access_integrity = false;
    LoadResult loaded = Load(metadata, dir, comm, options);
    const Node& sd = loaded.state_dict;
    EXPECT_EQ(JsonAt(sd, "ObjA/shard_0_1"), nlohmann::json::array({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    for (int i = 0; i < kWorldSize; ++i) {
      EXPECT_EQ(JsonAt(sd, fmt::format("ObjB/shard_0.{}_1.8", i)), nlohmann::json::array({i + 7}));
    }
    std::vector<double> repeated;  // arange(3).repeat(8)
    for (int i = 0; i < 3 * kWorldSize; ++i) repeated.push_back(i % 3);
    EXPECT_THAT(ValuesAt(sd, "TenA"), ElementsAre(0, 1));
    EXPECT_EQ(ValuesAt(sd, "TenB"), repeated);
    EXPECT_THAT(ValuesAt(sd, "TenC"), ElementsAre(0, 1, 2));
  });
}

// Deliberate difference from Megatron (§12): ShardedObject keys may contain
// '/' (Megatron's empty_from_unique_key splits at the only '/' and breaks on
// them); unique keys still end in "/shard_<offset>_<shape>".
TEST(MegatronSerializationTest, ShardedObjectKeysMayContainSlash) {
  ScratchDir scratch("sharded_object_slash");
  const std::string dir = scratch.Sub("ckpt");
  const std::string key = "decoder/layers.0/_extra_state";
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int64_t rank = comm.rank();
    Dict sd;
    sd["extra"] =
        ShardedObject{key, nlohmann::json{{"rank", rank}}, {1, kWorldSize}, {0, rank}, {0}};
    Save(Node(sd), dir, comm);
  });
  Node metadata = LoadShardedMetadata(dir);
  std::set<std::string> unique_keys;
  for (int i = 0; i < kWorldSize; ++i) unique_keys.insert(fmt::format("{}/shard_0.{}_1.8", key, i));
  EXPECT_EQ(KeysOf(metadata), unique_keys);
  for (const std::string& unique_key : unique_keys) {
    const ShardedObject parsed = ShardedObject::EmptyFromUniqueKey(unique_key);
    EXPECT_EQ(parsed.key, key);
    EXPECT_EQ(parsed.UniqueKey(), unique_key);
    EXPECT_EQ(metadata.at(unique_key).as<ShardedObject>().key, key);
  }
  RunRanks(kWorldSize, [&](Communicator& comm) {
    const int64_t rank = comm.rank();
    Dict request;
    request["extra"] =
        ShardedObject::EmptyFromUniqueKey(fmt::format("{}/shard_0.{}_1.8", key, rank));
    LoadResult loaded = Load(Node(request), dir, comm);
    EXPECT_EQ(JsonAt(loaded.state_dict, "extra"), (nlohmann::json{{"rank", rank}}));
  });
}

}  // namespace
}  // namespace distckpt::megatron
