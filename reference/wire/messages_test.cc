#include "wire/messages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "core/error_testing.h"
#include "wire/codec.h"

namespace distckpt {
namespace {

// Every field set, optional ones both ways.
CheckpointMetadata WrittenExample() {
  CheckpointMetadata md;
  md.format = "dcp";
  md.format_version = 2;
  md.writer = "distckpt 0.1.0";
  md.topology = "tp=2,pp=2";
  StoredTensor w{"decoder.weight", DType::kBF16, {4, 6}, {}};
  StoredChunk a;
  a.box = {{0, 0}, {2, 6}};
  a.file = "__0_0.bin";
  a.offset = 128;
  a.length = 24;
  a.checksum = 0xfedcba9876543210ULL;
  a.writer_rank = 3;
  a.block_size = 16;
  a.block_checksums = {1, UINT64_MAX};
  a.sums_checksum = 0x0123456789abcdefULL;
  StoredChunk b = a;
  b.box = {{2, 0}, {2, 6}};
  b.flat = FlatRange{2, 10};
  b.checksum.reset();
  b.block_size = 0;
  b.block_checksums.clear();
  b.sums_checksum.reset();
  w.chunks = {a, b};
  md.tensors.emplace(w.key, w);
  md.tensors.emplace("empty", StoredTensor{"empty", DType::kI64, {0}, {}});
  StoredObject o{"rng", "rng/shard_0_2", {2}, {0}, "__0_0.bin", 7, 9, 42, 1};
  md.objects.emplace(o.unique_key, o);
  md.common = {{"iteration", 100}, {"args", {{"lr", 0.5}}}};
  md.content = {{"distrib_optim_sharding_type", "fully_sharded_model_space"}};
  return md;
}

LocalMetadata Sharded() {
  ShardedTensor t;
  t.key = "a";
  t.dtype = DType::kF8E5M2;
  t.local_shape = {2, 3};
  t.global_shape = {4, 3};
  t.global_offset = {2, 0};
  t.axis_fragmentations = Shape{2, 1};
  t.replica_id = {0, 1, 2};
  t.prepend_axis_num = 0;
  t.allow_shape_mismatch = true;
  ShardedTensor flat = t;
  flat.key = "b";
  flat.axis_fragmentations.reset();
  flat.flattened_range = FlatRange{1, 5};
  flat.allow_shape_mismatch = false;
  ShardedObject o;
  o.key = "obj";
  o.global_shape = {2, 4};
  o.global_offset = {1, 3};
  o.replica_id = {1};
  return {t, flat, o};
}

TEST(WireMessagesTest, WrittenMetadataRoundTrips) {
  const CheckpointMetadata md = WrittenExample();
  const Written got = DecodeWritten(EncodeWritten(md), 1);
  ASSERT_TRUE(got.metadata.has_value());
  EXPECT_EQ(*got.metadata, md);
  const Written sums = DecodeWritten(EncodeWrittenChecksums({3, 0, UINT64_MAX}), 1);
  EXPECT_FALSE(sums.metadata.has_value());
  EXPECT_EQ(sums.checksums, (std::vector<uint64_t>{3, 0, UINT64_MAX}));
}

TEST(WireMessagesTest, ShardedMetadataRoundTrips) {
  const LocalMetadata md = Sharded();
  const LocalMetadata got = DecodeShardedMetadata(EncodeShardedMetadata(md), 2);
  ASSERT_EQ(got.size(), md.size());
  for (int i = 0; i < 2; ++i) {
    const auto& want = std::get<ShardedTensor>(md[i]);
    const auto& have = std::get<ShardedTensor>(got[i]);
    EXPECT_EQ(have.key, want.key);
    EXPECT_EQ(have.dtype, want.dtype);
    EXPECT_EQ(have.local_shape, want.local_shape);
    EXPECT_EQ(have.global_shape, want.global_shape);
    EXPECT_EQ(have.global_offset, want.global_offset);
    EXPECT_EQ(have.axis_fragmentations, want.axis_fragmentations);
    EXPECT_EQ(have.replica_id, want.replica_id);
    EXPECT_EQ(have.allow_shape_mismatch, want.allow_shape_mismatch);
    EXPECT_EQ(have.flattened_range, want.flattened_range);
  }
  const auto& o = std::get<ShardedObject>(got[2]);
  EXPECT_EQ(o.UniqueKey(), std::get<ShardedObject>(md[2]).UniqueKey());
  EXPECT_EQ(o.replica_id, ReplicaId{1});
}

// Every proper prefix and one trailing byte: a kComm error naming the
// message and the sender, never a crash or an allocation from a bad count.
TEST(WireMessagesTest, ShortOrLongMessagesAreMalformed) {
  const std::string written = EncodeWritten(WrittenExample());
  const std::string sharded = EncodeShardedMetadata(Sharded());
  for (size_t n = 0; n < written.size(); ++n) {
    EXPECT_THAT([&] { DecodeWritten(std::string_view(written).substr(0, n), 5); },
                ThrowsError(ErrorKind::kComm, "malformed written metadata from rank 5"))
        << n;
  }
  for (size_t n = 0; n < sharded.size(); ++n) {
    EXPECT_THAT([&] { DecodeShardedMetadata(std::string_view(sharded).substr(0, n), 6); },
                ThrowsError(ErrorKind::kComm, "malformed sharded metadata from rank 6"))
        << n;
  }
  EXPECT_THAT([&] { DecodeWritten(written + "x", 5); },
              ThrowsError(ErrorKind::kComm, "1 bytes after its end"));
  EXPECT_THAT([&] { DecodeShardedMetadata(written, 5); },
              ThrowsError(ErrorKind::kComm, "tag 77 where 76 was expected"));
}

TEST(WireMessagesTest, BadCountsAndDTypesAreRefused) {
  WireWriter huge;
  huge.U8('C');
  huge.U64(UINT64_MAX / 2);  // 2^63 checksums in a 9-byte message
  EXPECT_THAT([&] { DecodeWritten(huge.Take(), 0); },
              ThrowsError(ErrorKind::kComm, "does not fit the 0 bytes left"));
  std::string header = EncodeShardHeader({DType::kF32, 8, std::nullopt});
  header[1] = 12;  // one past the last dtype
  EXPECT_THAT([&] { DecodeShardHeader(header, 3); },
              ThrowsError(ErrorKind::kComm, "unknown dtype 12"));
}

TEST(WireMessagesTest, ShardsCarryBytesOrTheOwnersFailure) {
  Tensor t = Tensor::Empty(DType::kI16, {3});
  t.data_as<int16_t>()[0] = -1;
  t.data_as<int16_t>()[1] = 0;
  t.data_as<int16_t>()[2] = 7;
  const std::string message = EncodeShard(t);
  std::span<const std::byte> bytes;
  const ShardHeader header = DecodeShard(message, 1, &bytes);
  EXPECT_FALSE(header.failure.has_value());
  EXPECT_EQ(header.dtype, DType::kI16);
  EXPECT_EQ(header.nbytes, 6u);
  ASSERT_EQ(bytes.size(), 6u);
  EXPECT_EQ(std::memcmp(bytes.data(), t.data(), 6), 0);
  EXPECT_THAT([&] { DecodeShard(message.substr(0, message.size() - 1), 1, &bytes); },
              ThrowsError(ErrorKind::kComm, "5 bytes of shard data where its header says 6"));

  ShardHeader failed;
  failed.failure.emplace(ErrorKind::kCorruption, "data file x is truncated");
  const ShardHeader got = DecodeShardHeader(EncodeShardHeader(failed), 2);
  ASSERT_TRUE(got.failure.has_value());
  EXPECT_EQ(got.failure->kind(), ErrorKind::kCorruption);
  EXPECT_STREQ(got.failure->what(), "data file x is truncated");
}

TEST(WireMessagesTest, DecodedShardedMetadataIsValidated) {
  LocalMetadata md = Sharded();
  std::get<ShardedTensor>(md[0]).global_offset = {2};  // rank 1 of a rank-2 tensor
  EXPECT_THAT([&] { DecodeShardedMetadata(EncodeShardedMetadata(md), 0); },
              ThrowsError(ErrorKind::kInvalidSharding));
}

}  // namespace
}  // namespace distckpt
