// Tests of ShardedObject: unique keys, their parser (incl. the backward
// compatible -1 and keys holding '/'), validation and repr.
#include "mapping/sharded_object.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mapping/testing.h"

namespace distckpt {
namespace {

TEST(ShardedObjectTest, UniqueKey) {
  EXPECT_EQ((ShardedObject{"ObjB", {}, {1, 8}, {0, 3}}).UniqueKey(), "ObjB/shard_0.3_1.8");
  EXPECT_EQ((ShardedObject{"ObjA", {}, {1}, {0}}).UniqueKey(), "ObjA/shard_0_1");
  EXPECT_EQ((ShardedObject{"common_state", {}, {1}, {0}}).UniqueKey(), "common_state/shard_0_1");
}

TEST(ShardedObjectTest, RecordHoldsWhileTheDataIsUnchanged) {
  ShardedObject o{"rng", nlohmann::json{{"seed", 1}}, {1}, {0}};
  EXPECT_EQ(o.UnchangedRecord(), nullptr);
  o.record = std::make_shared<ObjectRecord>(ObjectRecord{"torch.save", "PK", o.data});
  EXPECT_EQ(o.UnchangedRecord(), o.record.get());
  EXPECT_EQ(o.WithoutData().record, nullptr);
  o.data["seed"] = 2;
  EXPECT_EQ(o.UnchangedRecord(), nullptr);
}

TEST(ShardedObjectTest, EmptyFromUniqueKeyRoundTrips) {
  const ShardedObject o = ShardedObject::EmptyFromUniqueKey("ObjB/shard_0.3_1.8", {0, 1});
  EXPECT_EQ(o.key, "ObjB");
  EXPECT_EQ(o.global_offset, (Shape{0, 3}));
  EXPECT_EQ(o.global_shape, (Shape{1, 8}));
  EXPECT_EQ(o.replica_id, (ReplicaId{0, 1}));
  EXPECT_TRUE(o.data.is_null());
  EXPECT_EQ(o.UniqueKey(), "ObjB/shard_0.3_1.8");
}

TEST(ShardedObjectTest, EmptyFromUniqueKeySplitsAtTheLastSlash) {
  // Megatron's split('/') raises here; we keep the '/' in the key.
  const ShardedObject o =
      ShardedObject::EmptyFromUniqueKey("decoder/layers.0/_extra_state/shard_2_4");
  EXPECT_EQ(o.key, "decoder/layers.0/_extra_state");
  EXPECT_EQ(o.global_offset, (Shape{2}));
  EXPECT_EQ(o.global_shape, (Shape{4}));
}

TEST(ShardedObjectTest, EmptyFromUniqueKeyBackwardCompatibleShape) {
  const ShardedObject o = ShardedObject::EmptyFromUniqueKey("ObjB/shard_0.3_1");
  EXPECT_EQ(o.global_offset, (Shape{0, 3}));
  EXPECT_EQ(o.global_shape, (Shape{1, -1}));
}

TEST(ShardedObjectTest, EmptyFromUniqueKeyRejectsMalformedKeys) {
  for (const char* bad : {"ObjB", "ObjB/shard_0.3", "ObjB/part_0_1", "ObjB/shard_0.x_1",
                          "ObjB/shard_0_1_2", "ObjB/shard_0.._1"}) {
    EXPECT_THAT(
        ErrorMessage(ErrorKind::kInvalidArgument, [&] { ShardedObject::EmptyFromUniqueKey(bad); }),
        testing::HasSubstr(std::string("Invalid ShardedObject unique key '") + bad + "'"));
  }
}

TEST(ShardedObjectTest, ValidateMetadataIntegrity) {
  ShardedObject o{"ObjA", nlohmann::json::array({1, 2}), {1, 8}, {0, 3}};
  EXPECT_NO_THROW(o.ValidateMetadataIntegrity());
  o.global_offset = {3};
  EXPECT_EQ(ErrorMessage(ErrorKind::kInvalidSharding, [&] { o.ValidateMetadataIntegrity(); }),
            "Global offset dimensions should be equal to global shape dimensions for "
            "ShardedObject(key='ObjA')");
}

TEST(ShardedObjectTest, WithoutDataAndRepr) {
  const ShardedObject o{"ObjA", nlohmann::json{{"some", "dict"}}, {1}, {0}, {0, 2}};
  const ShardedObject m = o.WithoutData();
  EXPECT_TRUE(m.data.is_null());
  EXPECT_FALSE(o.data.is_null());
  EXPECT_EQ(m.UniqueKey(), o.UniqueKey());
  EXPECT_EQ(m.replica_id, o.replica_id);
  EXPECT_EQ(o.ToString(), "ShardedObject(key='ObjA')");
}

}  // namespace
}  // namespace distckpt
