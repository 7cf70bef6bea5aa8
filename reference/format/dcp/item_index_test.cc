// The item index distckpt appends to its .distcp files: block CRC32s that
// combine to the record's, the record hash, the block size rule, a trailer
// and table (version 4: groups and their directory) that refuse damage,
// and versions 1 and 3 still read.
#include "format/dcp/item_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error_testing.h"
#include "format/block_checksums.h"
#include "format/dcp/dcp_writer.h"
#include "format/dcp/testing.h"
#include "format/dcp/torch_zip.h"
#include "format/hashed_writes.h"
#include "io/checksum.h"
#include "io/testing.h"

namespace distckpt {
namespace {

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(ItemIndexTest, BlockCrcsCombineToTheRecordCrc) {
  std::string data(10000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 300);
  std::vector<uint32_t> blocks;
  EXPECT_EQ(DcpBlockCrcs(AsBytes(data), 1024, &blocks), Crc32(AsBytes(data)));
  ASSERT_EQ(blocks.size(), 10u);  // the last block shorter (784 bytes)
  EXPECT_EQ(CombineBlockCrcs(blocks, 1024, data.size()), Crc32(AsBytes(data)));
  EXPECT_EQ(blocks[3], Crc32(AsBytes(data.substr(3072, 1024))));
  EXPECT_EQ(blocks[9], Crc32(AsBytes(data.substr(9216))));
}

// With helpers (from kHashOffloadMinBytes): the same block CRCs and record
// CRC, and the data handed on in order, for sizes around the threshold and
// partial last blocks.
TEST(ItemIndexTest, HelpedBlockCrcsEqualTheWritersOwn) {
  for (size_t size : {kHashOffloadMinBytes - 1, kHashOffloadMinBytes, kHashOffloadMinBytes + 1,
                      kHashOffloadMinBytes + 3000, size_t{3} << 20}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 31) ^ (i >> 11));
    for (uint32_t block_size : {1024u, 4096u}) {
      std::vector<uint32_t> alone, helped;
      std::string seen;
      const uint32_t crc = DcpBlockCrcs(AsBytes(data), block_size, &alone);
      EXPECT_EQ(DcpBlockCrcs(
                    AsBytes(data), block_size, &helped,
                    [&](std::span<const std::byte> piece) {
                      seen.append(reinterpret_cast<const char*>(piece.data()), piece.size());
                    },
                    1),
                crc)
          << size;
      EXPECT_EQ(helped, alone) << size << " " << block_size;
      EXPECT_EQ(seen, data) << size;
    }
  }
}

// Small records handed over together and hashed ahead by helpers, large and
// empty ones among them, in u8 and f32 tensors with rows of several block
// sizes: the same .distcp file and metadata as one by one without helpers.
TEST(ItemIndexTest, RecordsHashedAheadWriteTheSameFile) {
  std::mt19937_64 rng(13);
  std::vector<std::string> keys;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<std::string> data;
  for (int i = 0; i < 300; ++i) {
    const uint64_t kind = rng() % 20;
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 8);
    const int64_t cols = kind == 0 ? 0
                         : kind == 1
                             ? static_cast<int64_t>(kHashOffloadMinBytes / 4 / rows + rng() % 5000)
                             : 1 + static_cast<int64_t>(rng() % 9000);
    keys.push_back("t" + std::to_string(i));
    shapes.push_back({rows, cols});
    dtypes.push_back(rng() % 2 ? DType::kF32 : DType::kU8);
    std::string bytes(static_cast<size_t>(rows * cols) * DTypeSize(dtypes.back()), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    data.push_back(std::move(bytes));
  }
  std::vector<ChunkToWrite> chunks;
  for (size_t i = 0; i < keys.size(); ++i) {
    chunks.push_back(
        {&keys[i], dtypes[i], &shapes[i], Box{{0, 0}, shapes[i]}, std::nullopt, AsBytes(data[i])});
  }
  ScopedTempDir tmp;
  auto write = [&](const std::string& name, int helpers, bool together) {
    const std::string dir = JoinPath(tmp.path(), name);
    Env::Default()->CreateDirs(dir);
    DcpWriter writer(Env::Default(), dir, /*rank=*/0, /*stream=*/0, "dcp");
    writer.SetHelpers(helpers);
    if (together) {
      writer.WriteTensorChunks(chunks);
    } else {
      for (const ChunkToWrite& c : chunks)
        writer.WriteTensorChunk(*c.key, c.dtype, *c.global_shape, c.box, c.flat, c.bytes);
    }
    CheckpointMetadata md = writer.Finish();
    return std::make_pair(md, ReadFileToString(Env::Default(), JoinPath(dir, "__0_0.distcp")));
  };
  const auto [alone_md, alone_file] = write("alone", 0, false);
  EXPECT_GT(alone_file.size(), kHashOffloadMinBytes);
  for (int helpers : {1, 2}) {
    const auto [md, file] = write("helped" + std::to_string(helpers), helpers, true);
    EXPECT_EQ(md, alone_md) << helpers;
    EXPECT_TRUE(file == alone_file) << helpers;
  }
}

TEST(ItemIndexTest, BlockCrcsHandTheDataOnInOrder) {
  std::string data(600 << 10, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 251);
  for (uint32_t block_size : {0u, 2048u}) {
    std::vector<uint32_t> blocks;
    std::string seen;
    const uint32_t crc =
        DcpBlockCrcs(AsBytes(data), block_size, &blocks, [&](std::span<const std::byte> piece) {
          EXPECT_LE(piece.size(), 256u << 10);
          seen.append(reinterpret_cast<const char*>(piece.data()), piece.size());
        });
    EXPECT_EQ(crc, Crc32(AsBytes(data))) << block_size;
    EXPECT_EQ(seen, data) << block_size;
    EXPECT_EQ(blocks.size(), block_size == 0 ? 0u : 300u);
  }
}

TEST(ItemIndexTest, BlocksAreAnEighthOfARowBetween1And4KiB) {
  EXPECT_EQ(DcpBlockSize(16 << 10), 2048u);  // f32 rows of 4096
  EXPECT_EQ(DcpBlockSize(8 << 10), 1024u);   // bf16 rows of 4096: a TP-8 column split's run
  EXPECT_EQ(DcpBlockSize(100), 1024u);
  EXPECT_EQ(DcpBlockSize(1 << 30), 4096u);
  EXPECT_EQ(DcpBlockSize(0), 1024u);
}

// Version 5 (grouped, the one written), version 4 (its bytes; a flat item's
// blocks uniform) and version 3 (one table of 64-byte entries, what
// distckpt wrote before 2026-11-28, still read).
class ItemIndexVersionTest : public testing::TestWithParam<int> {};

TEST_P(ItemIndexVersionTest, RoundTripsAndRefusesDamage) {
  const int version = GetParam();
  const std::string items(5000, 'x');  // stands for the items
  DcpIndexWriter writer;
  writer.Add({.item_offset = 2000,
              .data_offset = 2400,
              .data_size = 2500,
              .binding = 7,
              .crcs_offset = 0,
              .hash = 0x1122334455667788,
              .crc = 9,
              .block_size = 1024},
             {1, 2, 3});
  writer.Add({.item_offset = 0,
              .data_offset = 384,
              .data_size = 100,
              .binding = 8,
              .crcs_offset = 0,
              .hash = 5,
              .crc = 10},
             {});
  const std::string file = items + writer.Finish(items.size(), version);
  auto bytes = AsBytes(file);
  std::optional<DcpIndexTrailer> trailer =
      ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), file.size(), "f");
  ASSERT_TRUE(trailer.has_value());
  EXPECT_EQ(trailer->items_end, 5000u);
  EXPECT_EQ(trailer->table_offset, 5000u + 12);
  EXPECT_EQ(trailer->version, version);
  const uint64_t table_bytes = file.size() - kDcpIndexTrailerBytes - trailer->table_offset;
  // Version 4: two entries of 2 + 2 + 2 + 20 + 2 + 1 and 1 + 2 + 1 + 20 + 1 + 1
  // bytes, one 32-byte directory entry.
  EXPECT_EQ(table_bytes, version == 3 ? 2u * 64 : 29u + 26 + 32);
  if (version >= 4) EXPECT_EQ(file.substr(file.size() - 8), fmt::format("DCPINDX{}", version));
  auto table = bytes.subspan(trailer->table_offset, table_bytes);
  std::vector<DcpIndexEntry> entries = ParseDcpIndexTable(table, *trailer, "f");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].item_offset, 0u);  // by item offset
  EXPECT_EQ(entries[0].data_offset, 384u);
  EXPECT_EQ(entries[0].data_size, 100u);
  EXPECT_EQ(entries[0].block_size, 0u);
  EXPECT_EQ(entries[0].hash, 5u);
  EXPECT_EQ(entries[0].crc, 10u);
  EXPECT_EQ(entries[0].flat_rows, version >= 5);  // says how flat items are cut
  EXPECT_EQ(entries[1].item_offset, 2000u);
  EXPECT_EQ(entries[1].data_offset, 2400u);
  EXPECT_EQ(entries[1].data_size, 2500u);
  EXPECT_EQ(entries[1].crcs_offset, 5000u);
  EXPECT_EQ(entries[1].binding, 7u);
  EXPECT_EQ(entries[1].hash, 0x1122334455667788u);
  EXPECT_EQ(entries[1].crc, 9u);
  EXPECT_EQ(entries[1].block_size, 1024u);
  EXPECT_EQ(DcpBlockCount(entries[1]), 3u);
  EXPECT_THAT(ParseDcpBlockCrcs(bytes.subspan(5000, 12)), testing::ElementsAre(1, 2, 3));

  // No magic: not an index (a file torch wrote ends with a zip end record).
  EXPECT_FALSE(ParseDcpIndexTrailer(bytes.subspan(100, kDcpIndexTrailerBytes), file.size(), "f"));
  // A trailer that does not fit its file, a table that fails its checksum.
  EXPECT_THAT([&] { ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), 5050, "f"); },
              ThrowsError(ErrorKind::kCorruption, "f: the item index trailer is damaged"));
  // Every byte of the table (version 4: of a group or the directory) is checked.
  for (uint64_t at = 0; at < table.size(); ++at) {
    std::string bad(table.size(), '\0');
    std::memcpy(bad.data(), table.data(), table.size());
    bad[at] ^= 1;
    const std::string what = version == 3             ? "f: the item index table"
                             : at < table.size() - 32 ? "f: item index group 0"
                                                      : "f: the item index directory";
    EXPECT_THAT([&] { ParseDcpIndexTable(AsBytes(bad), *trailer, "f"); },
                ThrowsError(ErrorKind::kCorruption, what))
        << at;
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, ItemIndexVersionTest, testing::Values(3, 4, 5));

// Version 4: a reader reads the directory, then only the groups of the items
// it looks up (adjacent groups a prefetch wants in one read), each once and
// checked; a damaged group is refused when it is read, naming the file.
TEST(ItemIndexTest, FileIndexReadsTheGroupsOfTheItemsItFinds) {
  const uint64_t n = 40;  // three groups: 16, 16, 8 entries
  std::string file(n * 1000, 'x');
  DcpIndexWriter writer;
  for (uint64_t i = 0; i < n; ++i) {
    writer.Add({.item_offset = i * 1000,
                .data_offset = i * 1000 + 300,
                .data_size = 600,
                .binding = i,
                .hash = i * 3,
                .crc = static_cast<uint32_t>(i),
                .block_size = i % 2 == 0 ? 256u : 0u},
               i % 2 == 0 ? std::vector<uint32_t>{uint32_t(i), uint32_t(i + 1), uint32_t(i + 2)}
                          : std::vector<uint32_t>{});
  }
  file += writer.Finish(file.size());
  ScopedTempDir tmp;
  const std::string path = JoinPath(tmp.path(), "f.distcp");
  WriteFileBytes(path, file);
  std::unique_ptr<RandomAccessFile> f = Env::Default()->NewRandomAccessFile(path);
  std::vector<std::byte> last(kDcpIndexTrailerBytes);
  f->Read(f->size() - last.size(), last);
  const DcpIndexTrailer trailer = *ParseDcpIndexTrailer(last, f->size(), path);
  ASSERT_EQ(trailer.version, kDcpIndexVersion);
  ASSERT_EQ(trailer.groups, 3u);
  std::atomic<uint64_t> read{0};
  DcpFileIndex index(trailer, f->size(), path, DcpReadFrom(*f, &read));
  EXPECT_EQ(read, 3u * kDcpIndexDirectoryEntryBytes);  // the directory only
  std::vector<DcpIndexGroup> groups = ParseDcpIndexDirectory(
      std::as_bytes(std::span(file)).subspan(trailer.directory_offset, 96), trailer, path);
  const DcpIndexEntry* e = index.Find(35000, DcpReadFrom(*f, &read));  // group 2
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->binding, 35u);
  EXPECT_EQ(e->block_size, 0u);
  EXPECT_EQ(read, 96 + groups[2].end - groups[2].begin);
  EXPECT_EQ(index.Find(35500, DcpReadFrom(*f, &read)), nullptr);  // no item there
  EXPECT_EQ(index.Find(36000, DcpReadFrom(*f, &read))->binding, 36u);
  EXPECT_EQ(read, 96 + groups[2].end - groups[2].begin);  // read once
  // The block CRCs of each item follow those of the items before it.
  const DcpIndexEntry* blocked = index.Find(38000, DcpReadFrom(*f, &read));
  EXPECT_EQ(blocked->crcs_offset, n * 1000 + 19 * 3 * 4);
  std::vector<std::byte> crcs(12);
  f->Read(blocked->crcs_offset, crcs);
  EXPECT_THAT(ParseDcpBlockCrcs(crcs), testing::ElementsAre(38, 39, 40));
  const uint64_t groups01 = groups[1].end - groups[0].begin;
  const uint64_t wanted[] = {0, 17000};
  index.Prefetch(wanted, DcpReadFrom(*f, &read));
  EXPECT_EQ(read, 96 + groups[2].end - groups[2].begin + groups01);
  EXPECT_EQ(index.Find(0, DcpReadFrom(*f, &read))->data_offset, 300u);
  EXPECT_EQ(index.Find(16000, DcpReadFrom(*f, &read))->crcs_offset, n * 1000 + 8 * 3 * 4);
  EXPECT_EQ(read, groups[2].end - groups[0].begin + 96);  // the whole index, each byte once
  // The groups of items (one that lists none: the group it would be in),
  // and their bytes in runs of adjacent groups: what a load's owner of the
  // file reads for its ranks (DcpReader::PrepareReads).
  const uint64_t items[] = {0, 1000, 17000, 35000, 35500};
  EXPECT_THAT(index.GroupsOf(items), testing::ElementsAre(0u, 1u, 2u));
  const uint64_t apart[] = {0, 2, 3}, adjacent[] = {1, 2};  // no group 3
  EXPECT_THAT(index.GroupRuns(apart),
              testing::ElementsAre(testing::Pair(groups[0].begin, groups[0].end),
                                   testing::Pair(groups[2].begin, groups[2].end)));
  EXPECT_THAT(index.GroupRuns(adjacent),
              testing::ElementsAre(testing::Pair(groups[1].begin, groups[2].end)));

  // A flipped byte in group 1 is found when group 1 is read, not before.
  file[groups[1].begin + 5] ^= 1;
  WriteFileBytes(path, file);
  f = Env::Default()->NewRandomAccessFile(path);
  DcpFileIndex damaged(trailer, f->size(), path, DcpReadFrom(*f, &read));
  EXPECT_EQ(damaged.Find(1000, DcpReadFrom(*f, &read))->binding, 1u);
  EXPECT_THAT([&] { damaged.Find(20000, DcpReadFrom(*f, &read)); },
              ThrowsError(ErrorKind::kCorruption, path + ": item index group 1"));
}

// Version 4 groups are read by a varint parser: a group whose bytes were
// changed and then resealed (its hash, the directory's and the trailer's
// recomputed, as damage that passes the checksums would be) parses to
// entries that fit the file or is refused as kCorruption: never a read
// past the group, a crash or another exception.
TEST(ItemIndexTest, ResealedGroupsParseOrAreRefused) {
  const std::string items(50000, 'x');
  DcpIndexWriter writer;
  for (uint64_t i = 0; i < 20; ++i) {
    writer.Add({.item_offset = i * 2000,
                .data_offset = i * 2000 + 300,
                .data_size = 1500,
                .binding = i,
                .hash = i,
                .crc = 1,
                .block_size = 512,
                .tiles = i % 3 == 0 ? 3u : 0u},
               std::vector<uint32_t>(3, 7));
  }
  const std::string file = items + writer.Finish(items.size());
  const auto bytes = AsBytes(file);
  const DcpIndexTrailer trailer =
      *ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), file.size(), "f");
  const std::vector<DcpIndexGroup> groups = ParseDcpIndexDirectory(
      bytes.subspan(trailer.directory_offset, trailer.groups * kDcpIndexDirectoryEntryBytes),
      trailer, "f");
  ASSERT_EQ(groups.size(), 2u);
  std::mt19937_64 random(40);
  int parsed = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    DcpIndexGroup group = groups[round % 2];
    std::string g = file.substr(group.begin, group.end - group.begin);
    const int changes = 1 + static_cast<int>(random() % 4);
    for (int c = 0; c < changes; ++c) {
      const uint64_t at = random() % g.size();
      switch (random() % 3) {
        case 0:
          g[at] = static_cast<char>(random());
          break;
        case 1:
          g.erase(at, 1 + random() % 3);
          break;
        default:
          g.insert(at, 1 + random() % 3, static_cast<char>(random()));
          break;
      }
      if (g.empty()) g = "\x80";
    }
    group.end = group.begin + g.size();
    group.hash = Checksum(AsBytes(g));
    try {
      for (const DcpIndexEntry& e : ParseDcpIndexGroup(AsBytes(g), group, trailer, "f")) {
        ASSERT_LE(e.data_offset + e.data_size, trailer.items_end);
        ASSERT_LE(e.crcs_offset + 4 * DcpBlockCount(e), trailer.table_offset);
      }
      ++parsed;
    } catch (const CheckpointError& e) {
      ASSERT_EQ(e.kind(), ErrorKind::kCorruption) << e.what();
      ASSERT_THAT(e.what(), testing::StartsWith("f: item index ")) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(parsed, 10);  // changed values that still fit the file
}

// Version 1 (distckpt before 2026-11-27: 48-byte entries without `hash`,
// magic "DCPINDX1") still parses; its records are then checked by CRC32.
TEST(ItemIndexTest, Version1IndexesStillParse) {
  auto put = [](std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string file(3000, 'x');
  put(file, 0xabcdef01, 4);  // the one block CRC... of two
  put(file, 0x12345678, 4);
  std::string table;
  for (uint64_t v : {uint64_t{100}, uint64_t{164}, uint64_t{2048}, uint64_t{77}, uint64_t{3000}})
    put(table, v, 8);
  put(table, 0xfeed, 4);
  put(table, 1024, 4);
  file += table;
  put(file, 3000, 8);
  put(file, 3008, 8);
  put(file, 1, 8);
  put(file, Checksum(AsBytes(table)), 8);
  file += "DCPINDX1";
  auto bytes = AsBytes(file);
  std::optional<DcpIndexTrailer> trailer =
      ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), file.size(), "old");
  ASSERT_TRUE(trailer.has_value());
  EXPECT_EQ(trailer->version, 1);
  std::vector<DcpIndexEntry> entries = ParseDcpIndexTable(bytes.subspan(3008, 48), *trailer, "old");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0], (DcpIndexEntry{.item_offset = 100,
                                       .data_offset = 164,
                                       .data_size = 2048,
                                       .binding = 77,
                                       .crcs_offset = 3000,
                                       .hash = std::nullopt,
                                       .crc = 0xfeed,
                                       .block_size = 1024}));
  // A version-2 reading of the same table is refused (its size does not fit).
  std::string v2 = file;
  v2.replace(v2.size() - 8, 8, "DCPINDX2");
  EXPECT_THAT(
      [&] { ParseDcpIndexTrailer(AsBytes(v2).last(kDcpIndexTrailerBytes), v2.size(), "old"); },
      ThrowsError(ErrorKind::kCorruption, "old: the item index trailer is damaged"));
}

// A record's index hash streams: any split of the record into pieces gives
// the digest of native's block checksums of its 64 KiB blocks, combined.
TEST(ItemIndexTest, RecordHashIsTheSameForAnySplit) {
  std::string data((3 << 16) + 12345, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 % 253);
  std::vector<uint64_t> sums;
  for (size_t at = 0; at < data.size(); at += 64 << 10) {
    sums.push_back(BlockChecksum(
        AsBytes(data).subspan(at, std::min<size_t>(64 << 10, data.size() - at)), 42, sums.size()));
  }
  const uint64_t expected = SumsChecksum(sums, 42);
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    DcpRecordHasher hasher(42);
    for (size_t at = 0; at < data.size();) {
      const size_t n = std::min<size_t>(data.size() - at, trial == 0 ? 256 << 10 : rng() % 100000);
      hasher.Update(AsBytes(data).subspan(at, n));
      at += n;
    }
    EXPECT_EQ(hasher.Digest(), expected) << trial;
  }
  std::vector<uint32_t> blocks;
  EXPECT_EQ(DcpHashRecord(AsBytes(data), 4096, 42, &blocks).hash, expected);
  EXPECT_EQ(DcpHashRecord(AsBytes(data), 4096, 42, &blocks, nullptr, 1).hash, expected);
  EXPECT_NE(DcpHashRecord(AsBytes(data), 4096, 43, &blocks).hash, expected);  // bound
}

}  // namespace
}  // namespace distckpt
