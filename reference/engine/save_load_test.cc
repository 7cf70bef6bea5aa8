// End-to-end save/load over in-process ranks: resharding, byte accounting,
// corruption, incomplete directories, refused saves, full disks, agreement.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "io/checksum.h"
#include "io/fault_env.h"
#include "io/testing.h"
#include "mapping/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Global [rows, cols] f32 tensor with value = linear index; rank r of n holds rows split `axis`.
ShardedTensor Shard(const std::string& key, Shape global, int axis, int part, int parts,
                    ReplicaId replica = {0}) {
  return Slab(key, global, axis, part, parts, true, 0, replica);
}

Node StateOf(std::vector<std::pair<std::string, Node>> items) {
  Dict d;
  for (auto& [k, v] : items) d[k] = std::move(v);
  return Node(std::move(d));
}

void ExpectArange(const Tensor& t, const Shape& global, const Box& box) {
  ASSERT_EQ(t.numel(), box.volume());
  for (int64_t i = 0; i < box.shape[0]; ++i) {
    for (int64_t j = 0; j < box.shape[1]; ++j) {
      float want = static_cast<float>((box.offset[0] + i) * global[1] + box.offset[1] + j);
      ASSERT_EQ(t.At(i * box.shape[1] + j), want) << "at " << i << "," << j;
    }
  }
}

void SaveRows(const std::string& dir, int world, Shape global, Env* env = nullptr) {
  RunRanks(world, [&](Communicator& comm) {
    SaveOptions options;
    options.env = env;
    Save(StateOf({{"w", Node(Shard("w", global, 0, comm.rank(), world))}}), dir, comm, options);
  });
}

TEST(SaveLoadTest, ReshardRowsToColumnsLoadsEveryElement) {
  ScopedTempDir tmp;
  Shape global{12, 6};
  SaveRows(tmp.path(), 4, global);
  RunRanks(3, [&](Communicator& comm) {
    ShardedTensor want = Shard("w", global, 1, comm.rank(), 3);
    std::memset(want.data.data(), 0xff, want.data.nbytes());
    LoadResult r = Load(StateOf({{"w", Node(want)}}), tmp.path(), comm);
    ExpectArange(r.state_dict.at("w").as<Tensor>(), global, want.GlobalBox());
    // Columns of row-major chunks: every touched 16-byte block is read and
    // verified, so more than the 8-byte pieces needed (at most 3x here).
    EXPECT_GE(r.summary.bytes_read, r.summary.bytes_needed);
    EXPECT_LE(r.summary.bytes_read, 3 * r.summary.bytes_needed);
    EXPECT_EQ(r.summary.chunks_unverified, 0u);
    EXPECT_EQ(r.summary.bytes_needed, 12u * 2 * 4);
  });
}

TEST(SaveLoadTest, KeyOfManyChunksAskedForTwiceLoadsEveryElement) {
  // 80 stored chunks of one key, two requested pieces of it: the load plans
  // them through one ChunkIndex of the key (engine/chunk_index.h).
  ScopedTempDir tmp;
  Shape global{80, 6};
  RunRanks(1, [&](Communicator& comm) {
    std::vector<std::pair<std::string, Node>> rows;
    for (int r = 0; r < 80; ++r) {
      rows.emplace_back("w" + std::to_string(r), Node(Shard("w", global, 0, r, 80)));
    }
    Save(StateOf(std::move(rows)), tmp.path(), comm);
  });
  RunRanks(1, [&](Communicator& comm) {
    ShardedTensor left = Shard("w", global, 1, 0, 2), right = Shard("w", global, 1, 1, 2);
    std::memset(left.data.data(), 0xff, left.data.nbytes());
    std::memset(right.data.data(), 0xff, right.data.nbytes());
    LoadResult r = Load(StateOf({{"left", Node(left)}, {"right", Node(right)}}), tmp.path(), comm);
    ExpectArange(r.state_dict.at("left").as<Tensor>(), global, left.GlobalBox());
    ExpectArange(r.state_dict.at("right").as<Tensor>(), global, right.GlobalBox());
    EXPECT_EQ(r.summary.bytes_needed, 80u * 6 * 4);
  });
}

TEST(SaveLoadTest, AThirdOfAChunkReadsAThirdOfItsBytes) {
  ScopedTempDir tmp;
  Shape global{9, 8};
  SaveRows(tmp.path(), 1, global);  // one stored chunk of 9 rows
  RunRanks(3, [&](Communicator& comm) {
    ShardedTensor want = Shard("w", global, 0, comm.rank(), 3);
    LoadResult r = Load(StateOf({{"w", Node(want)}}), tmp.path(), comm);
    ExpectArange(r.state_dict.at("w").as<Tensor>(), global, want.GlobalBox());
    EXPECT_EQ(r.summary.bytes_needed, 9u * 8 * 4 / 3);
    EXPECT_EQ(r.summary.bytes_read, r.summary.bytes_needed);
    // Rows 3r..3r+2: 96 bytes, six whole 16-byte blocks, each verified.
    EXPECT_EQ(r.summary.chunks_unverified, 0u);
    EXPECT_EQ(r.summary.chunks_verified, 1u);
  });
}

TEST(SaveLoadTest, ConvertsDtypeOnLoad) {
  ScopedTempDir tmp;
  Shape global{4, 4};
  SaveRows(tmp.path(), 2, global);
  RunRanks(1, [&](Communicator& comm) {
    ShardedTensor want;
    want.key = "w";
    want.dtype = DType::kBF16;
    want.local_shape = want.global_shape = global;
    want.global_offset = {0, 0};
    want.axis_fragmentations = Shape{1, 1};
    LoadResult r = Load(StateOf({{"w", Node(want)}}), tmp.path(), comm);
    const Tensor& t = r.state_dict.at("w").as<Tensor>();
    EXPECT_EQ(t.dtype(), DType::kBF16);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(t.At(i), i);
  });
}

TEST(SaveLoadTest, FlippedByteIsCorruptionNamingFileAndKey) {
  ScopedTempDir tmp;
  SaveRows(tmp.path(), 2, {4, 4});
  std::string file = (fs::path(tmp.path()) / "__1_0.bin").string();
  ASSERT_TRUE(fs::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(5);
    f.write(&c, 1);
  }
  RunRanks(2, [&](Communicator& comm) {
    ShardedTensor want = Shard("w", {4, 4}, 0, comm.rank(), 2);
    try {
      Load(StateOf({{"w", Node(want)}}), tmp.path(), comm);
      ADD_FAILURE() << "corruption not detected";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruption);
      EXPECT_THAT(e.what(), HasSubstr("__1_0.bin"));
      EXPECT_THAT(e.what(), HasSubstr("'w'"));
      EXPECT_THAT(e.what(), HasSubstr("rank 1"));  // every rank learns who failed
    }
  });
}

// One edited digit of metadata.json (then resealed): chunk 0's offset
// [0, 0] -> [1, 0] overlaps chunk 1 by one row and uncovers row 0, as many
// elements as the overlap, so counting covered elements cannot tell.
TEST(SaveLoadTest, ShiftedChunkOffsetInMetadataIsRefusedOnOpen) {
  ScopedTempDir tmp;
  SaveRows(tmp.path(), 2, {4, 4});
  const std::string path = (fs::path(tmp.path()) / "metadata.json").string();
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"offset\":[0,0]");
  ASSERT_NE(at, std::string::npos);
  text[at + 10] = '1';
  // Resealed (metadata_checksum recomputed, as a tool rewriting the file
  // would): the tiling check still refuses it on open.
  nlohmann::json j = nlohmann::json::parse(text);
  j.erase("metadata_checksum");
  const std::string canonical = j.dump();
  j["metadata_checksum"] =
      ChecksumToHex(Checksum(std::as_bytes(std::span(canonical.data(), canonical.size()))));
  text = j.dump();
  std::ofstream(path, std::ios::trunc) << text;
  for (int world : {1, 2}) {
    RunRanks(world, [&](Communicator& comm) {
      Node request = StateOf({{"w", Node(Shard("w", {4, 4}, 0, comm.rank(), world))}});
      EXPECT_THAT([&] { Load(request, tmp.path(), comm); },
                  ThrowsError(ErrorKind::kCorruption,
                              path + ": tensor 'w': stored chunks[0] [1:3, 0:4] (file __0_0.bin, "
                                     "rank 0) and chunks[1] [2:4, 0:4] (file __1_0.bin, rank 1) "
                                     "overlap in [2:3, 0:4]"));
    });
  }
}

// Tensors with a 0 axis are recorded (dtype, global shape, empty chunks) and
// load under another sharding, in both formats; even one that only a
// non-main replica holds (a valid layout: no element lacks a main replica).
TEST(SaveLoadTest, TensorsOfNoElementsComeBack) {
  auto empty = [](const std::string& key, Shape local, int axis, int part, int parts,
                  ReplicaId replica = {0}) {
    return Node(ShardedTensor::FromRankOffsets(key, Tensor::Empty(DType::kBF16, std::move(local)),
                                               {{axis, part, parts}}, replica));
  };
  for (const Format* format : {&NativeFormat(), &FormatByName("dcp")}) {
    ScopedTempDir tmp;
    RunRanks(2, [&](Communicator& comm) {
      SaveOptions options;
      options.format = format;
      const int r = comm.rank();
      Node state = StateOf({{"e", empty("e", {0}, 0, r, 2)},  // both: the empty shard at offset 0
                            {"rows", empty("rows", {2, 0}, 0, r, 2)},
                            {"w", Node(Shard("w", {4, 2}, 0, r, 2))}});
      if (r == 1) state.as<Dict>()["replica"] = empty("replica", {3, 0}, 0, 0, 1, {1});
      Save(state, tmp.path(), comm, options);
    });
    const Node stored = LoadTensorsMetadata(tmp.path());
    EXPECT_EQ(stored.at("replica").as<ShardedTensor>().global_shape, (Shape{3, 0}));
    EXPECT_EQ(stored.at("e").as<ShardedTensor>().global_shape, (Shape{0})) << format->name();
    EXPECT_EQ(stored.at("rows").as<ShardedTensor>().global_shape, (Shape{4, 0}));
    EXPECT_EQ(stored.at("rows").as<ShardedTensor>().dtype, DType::kBF16);
    RunRanks(3, [&](Communicator& comm) {
      LoadOptions options;
      options.strict = StrictHandling::kRaiseAll;
      const int r = comm.rank();
      LoadResult result = Load(StateOf({{"e", empty("e", {0}, 0, r, 3)},
                                        {"replica", empty("replica", {3, 0}, 1, r, 3)},
                                        {"rows", empty("rows", {4, 0}, 1, r, 3)},
                                        {"w", Node(Shard("w", {4, 2}, 1, r % 2, 2, {r / 2}))}}),
                               tmp.path(), comm, options);
      EXPECT_EQ(result.state_dict.at("e").as<Tensor>().shape(), (Shape{0}));
      EXPECT_EQ(result.state_dict.at("rows").as<Tensor>().shape(), (Shape{4, 0}));
      EXPECT_EQ(result.state_dict.at("replica").as<Tensor>().shape(), (Shape{3, 0}));
      ExpectArange(result.state_dict.at("w").as<Tensor>(), {4, 2}, Box{{0, r % 2}, {4, 1}});
    });
  }
}

TEST(SaveLoadTest, DirectoryWithoutMetadataIsRefusedAsIncomplete) {
  ScopedTempDir tmp;
  SaveRows(tmp.path(), 2, {4, 4});
  fs::remove(fs::path(tmp.path()) / "metadata.json");
  RunRanks(2, [&](Communicator& comm) {
    EXPECT_THAT(
        [&] {
          Load(StateOf({{"w", Node(Shard("w", {4, 4}, 0, comm.rank(), 2))}}), tmp.path(), comm);
        },
        ThrowsError(ErrorKind::kIncomplete, "is not a distributed checkpoint"));
  });
}

TEST(SaveLoadTest, GapIsRefusedOnEveryRankWithTheGridAndNothingCommitted) {
  ScopedTempDir tmp;
  RunRanks(4, [&](Communicator& comm) {
    // Rank 2's shard is marked as a replica: nobody writes rows 6-8.
    ReplicaId replica = comm.rank() == 2 ? ReplicaId{1} : ReplicaId{0};
    Node state = StateOf({{"w", Node(Shard("w", {12, 2}, 0, comm.rank(), 4, replica))}});
    EXPECT_THAT([&] { Save(state, tmp.path(), comm); },
                ThrowsError(ErrorKind::kInvalidSharding,
                            "Invalid access pattern for ShardedTensor(key='w'"));
  });
  EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "metadata.json"));
}

TEST(SaveLoadTest, OverlapIsRefusedNamingTheCountGrid) {
  ScopedTempDir tmp;
  RunRanks(2, [&](Communicator& comm) {
    // Both ranks claim chunk 0 as main replica; chunk 1 has none.
    Node state = StateOf({{"w", Node(Shard("w", {4, 2}, 0, 0, 2))}});
    try {
      Save(state, tmp.path(), comm);
      ADD_FAILURE() << "overlap accepted";
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidSharding);
      EXPECT_THAT(e.what(), HasSubstr("[[2]\n [0]]"));  // count grid over (2, 1) fragments
    }
  });
}

TEST(SaveLoadTest, FullDiskFailsEveryRankAndKeepsThePreviousCheckpoint) {
  ScopedTempDir tmp;
  Shape global{8, 64};
  SaveRows(tmp.path(), 2, global);  // the previous good checkpoint
  FaultInjectionEnv env(Env::Default());
  env.FailWritesAfter(1000);  // less than one rank's 1 KiB chunk
  RunRanks(2, [&](Communicator& comm) {
    SaveOptions options;
    options.env = &env;
    options.overwrite = true;
    Node state = StateOf({{"w", Node(Shard("w", global, 0, comm.rank(), 2))}});
    EXPECT_THAT([&] { Save(state, tmp.path(), comm, options); },
                ThrowsError(ErrorKind::kIo, "rank"));
  });
  // The old checkpoint still loads, bit-exact.
  Node plain = LoadPlainTensors(tmp.path());
  ExpectArange(plain.at("w").as<Tensor>(), global, Box{{0, 0}, global});
}

TEST(SaveLoadTest, RefusesToOverwriteACommittedCheckpointByDefault) {
  ScopedTempDir tmp;
  SaveRows(tmp.path(), 1, {2, 2});
  RunRanks(1, [&](Communicator& comm) {
    EXPECT_THAT(
        [&] {
          Save(StateOf({{"w", Node(Shard("w", {2, 2}, 0, 0, 1))}}), tmp.path(), comm);
        },
        ThrowsError(
            ErrorKind::kInvalidArgument,
            "refusing to save into " + tmp.path() +
                ": it holds a native checkpoint (metadata.json); a save replaces a committed "
                "checkpoint only when told to (distckpt save --overwrite"));
  });
}

// Issue 39: a save that fails (a full disk) removes the data files it wrote,
// so the disk does not stay full; into a staging directory, the staging
// directory goes; the previous checkpoint stays.
TEST(SaveLoadTest, FailedSaveRemovesItsPartialFiles) {
  ScopedTempDir tmp;
  const std::string fresh = JoinPath(tmp.path(), "fresh");
  const std::string previous = JoinPath(tmp.path(), "previous");
  Shape global{8, 64};
  SaveRows(previous, 2, global);
  const std::vector<std::string> previous_files = Env::Default()->ListDir(previous);
  for (const std::string& dir : {fresh, previous}) {
    FaultInjectionEnv env(Env::Default());
    env.FailWritesAfter(1500);  // rank 0's 1 KiB chunk is written, rank 1's is not
    RunRanks(2, [&](Communicator& comm) {
      SaveOptions options;
      options.env = &env;
      options.overwrite = true;
      Node state = StateOf({{"w", Node(Shard("w", global, 0, comm.rank(), 2))}});
      EXPECT_THAT([&] { Save(state, dir, comm, options); }, ThrowsError(ErrorKind::kIo));
    });
  }
  EXPECT_THAT(Env::Default()->ListDir(fresh), testing::IsEmpty());
  EXPECT_FALSE(Env::Default()->FileExists(previous + ".staging"));
  EXPECT_EQ(Env::Default()->ListDir(previous), previous_files);
  Node plain = LoadPlainTensors(previous);
  ExpectArange(plain.at("w").as<Tensor>(), global, Box{{0, 0}, global});
}

TEST(SaveLoadTest, UnexpectedKeyWithDefaultStrictNamesTheKey) {
  ScopedTempDir tmp;
  SaveRows(tmp.path(), 1, {2, 2});
  RunRanks(2, [&](Communicator& comm) {
    Node request = StateOf({{"v", Node(Shard("v", {2, 2}, 0, comm.rank(), 2))}});
    EXPECT_THAT([&] { Load(request, tmp.path(), comm); },
                ThrowsError(ErrorKind::kKeyMismatch, "v from model not in state dict: [w]"));
  });
}

TEST(SaveLoadTest, FailureOnOneRankReachesEveryRank) {
  ScopedTempDir tmp;
  std::mutex mu;
  std::vector<std::string> messages;
  RunRanks(3, [&](Communicator& comm) {
    ShardedTensor t = Shard("w", {3, 2}, 0, comm.rank(), 3);
    if (comm.rank() == 1) t.global_offset = {1};  // rule 4: offset rank differs from shape rank
    try {
      Save(StateOf({{"w", Node(t)}}), tmp.path(), comm);
    } catch (const CheckpointError& e) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
  });
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0], messages[1]);
  EXPECT_EQ(messages[1], messages[2]);
  EXPECT_THAT(messages[0], HasSubstr("rank 1"));
}

TEST(SaveLoadTest, ObjectsCommonStateAndNonpersistentValuesComeBack) {
  ScopedTempDir tmp;
  RunRanks(2, [&](Communicator& comm) {
    ShardedObject o;
    o.key = "rng";
    o.global_shape = {2};
    o.global_offset = {comm.rank()};
    o.data = {{"state", comm.rank() * 10}};
    Node state =
        StateOf({{"rng", Node(o)},
                 {"iteration", Node(nlohmann::json(7))},
                 {"local", Node(LocalNonpersistentObject{nlohmann::json("never saved")})}});
    Save(state, tmp.path(), comm);
  });
  RunRanks(2, [&](Communicator& comm) {
    ShardedObject want;
    want.key = "rng";
    want.global_shape = {2};
    want.global_offset = {comm.rank()};
    Node request =
        StateOf({{"rng", Node(want)},
                 {"local", Node(LocalNonpersistentObject{nlohmann::json(comm.rank())})}});
    LoadResult r = Load(request, tmp.path(), comm);
    EXPECT_EQ(r.state_dict.at("rng").as<nlohmann::json>()["state"], comm.rank() * 10);
    EXPECT_EQ(r.state_dict.at("iteration").as<nlohmann::json>(), 7);
    EXPECT_EQ(r.state_dict.at("local").as<nlohmann::json>(), comm.rank());
  });
}

}  // namespace
}  // namespace distckpt
