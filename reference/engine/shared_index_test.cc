// A DCP load's ranks read each data file's item index once between them
// (CheckpointReader::PrepareReads, issue 40): ranks that cannot share a
// parsed index (separate processes under MPI; here, threads whose Env is
// not "posix", which turns off the process-wide sharing of DcpReader) read
// no more index bytes in all than one reader serving every rank, and a
// flipped byte in a piece one rank read and sent is still refused, naming
// the file, on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "comm/thread_world.h"
#include "core/error_testing.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/dcp/dcp_format.h"
#include "format/dcp/item_index.h"
#include "io/forwarding_env.h"
#include "io/testing.h"
#include "mapping/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

constexpr int kTensors = 40;  // items per data file: 3 groups of the index
const Shape kGlobal{12, 12};

// Tensor `i`, value = i * 1000 + linear index; part `part` of `parts` along
// `axis` (empty: every value -1).
ShardedTensor Slab(int i, int axis, int part, int parts, bool with_data) {
  return distckpt::Slab("t" + std::to_string(i), kGlobal, axis, part, parts, with_data,
                        static_cast<float>(i * 1000));
}

// Saved by 4 ranks along `axis` 0 for even tensors, 1 for odd ones; loaded
// by 3 (`parts` = 3) along the other axis, so every item is split between
// ranks. A rank `part` >= parts requests nothing (an empty shard).
Node State(int part, int parts, bool saved) {
  Dict d;
  d["iteration"] = Node(nlohmann::json(7));
  if (part >= parts) return Node(std::move(d));
  for (int i = 0; i < kTensors; ++i) {
    const int axis = (i % 2 == 0) == saved ? 0 : 1;
    d["t" + std::to_string(i)] = Node(Slab(i, axis, part, parts, saved));
  }
  return Node(std::move(d));
}

bool HoldsSavedValues(const Node& loaded, int part, int parts) {
  if (part >= parts) return true;
  for (int i = 0; i < kTensors; ++i) {
    const ShardedTensor want = Slab(i, i % 2 == 0 ? 1 : 0, part, parts, true);
    if (!loaded.at(want.key).as<Tensor>().Equals(want.data)) return false;
  }
  return true;
}

// The process-wide sharing of parsed indexes keys on a "posix" Env: this
// one reads the same files without it, as separate processes would.
class UnsharedEnv : public ForwardingEnv {
 public:
  UnsharedEnv() : ForwardingEnv(Env::Default()) {}
  std::string_view name() const override { return "unshared"; }
};

std::string SaveDcp(const std::string& dir) {
  RunRanks(4, [&](Communicator& comm) {
    SaveOptions options;
    options.format = &DcpFormat();
    Save(State(comm.rank(), 4, true), dir, comm, options);
  });
  return dir;
}

// Loads `dir` on `world` ranks (the last `world - 3` request nothing), each
// with its own reader; returns the bytes read by all of them.
uint64_t LoadSeparately(const std::string& dir, int world, Env* env) {
  std::atomic<uint64_t> read{0};
  RunRanks(world, [&](Communicator& comm) {
    LoadOptions options;
    options.env = env;
    LoadResult r = Load(State(comm.rank(), 3, false), dir, comm, options);
    EXPECT_TRUE(HoldsSavedValues(r.state_dict, comm.rank(), 3)) << "rank " << comm.rank();
    read += r.summary.bytes_read;
  });
  return read;
}

// The same loads through one reader that every rank shares: each index
// byte read once, by construction.
uint64_t LoadThroughOneReader(const std::string& dir, int world, Env* env) {
  std::unique_ptr<CheckpointReader> reader = DetectFormat(env, dir).OpenReader(env, dir);
  RunRanks(world, [&](Communicator& comm) {
    LoadResult r = Load(State(comm.rank(), 3, false), *reader, comm, LoadOptions());
    EXPECT_TRUE(HoldsSavedValues(r.state_dict, comm.rank(), 3)) << "rank " << comm.rank();
  });
  return reader->stats().bytes_read;
}

TEST(SharedIndexTest, RanksReadEachIndexPieceOnceBetweenThem) {
  ScopedTempDir tmp;
  const std::string dir = SaveDcp(tmp.path());
  UnsharedEnv unshared;
  for (int world : {3, 4}) {  // 4: one rank requests nothing, yet takes part
    SCOPED_TRACE(testing::Message() << "world " << world);
    const uint64_t once = LoadThroughOneReader(dir, world, &unshared);
    EXPECT_EQ(LoadSeparately(dir, world, &unshared), once);
    // The threads backend (process-wide sharing on) reads the same.
    EXPECT_EQ(LoadSeparately(dir, world, Env::Default()), once);
  }
}

// The version-4 trailer, directory and group byte ranges of `path`.
struct IndexLayout {
  DcpIndexTrailer trailer;
  std::vector<DcpIndexGroup> groups;
};

IndexLayout LayoutOf(const std::string& path) {
  std::unique_ptr<RandomAccessFile> f = Env::Default()->NewRandomAccessFile(path);
  std::vector<std::byte> last(kDcpIndexTrailerBytes);
  f->Read(f->size() - last.size(), last);
  IndexLayout layout{*ParseDcpIndexTrailer(last, f->size(), path), {}};
  std::vector<std::byte> directory(f->size() - kDcpIndexTrailerBytes -
                                   layout.trailer.directory_offset);
  f->Read(layout.trailer.directory_offset, directory);
  layout.groups = ParseDcpIndexDirectory(directory, layout.trailer, path);
  return layout;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x10));
}

// Every rank of a load of `dir` fails naming `file` and `what`.
void ExpectRefused(const std::string& dir, const std::string& file, const std::string& what,
                   Env* env) {
  std::vector<RankOutcome> outcomes = RunRanksCollect(4, [&](Communicator& comm) {
    LoadOptions options;
    options.env = env;
    Load(State(comm.rank(), 3, false), dir, comm, options);
  });
  for (const RankOutcome& o : outcomes) {
    SCOPED_TRACE(testing::Message() << "rank " << o.rank);
    ASSERT_TRUE(o.error);
    EXPECT_THAT([&] { std::rethrow_exception(o.error); },
                ThrowsError(ErrorKind::kCorruption, file));
    EXPECT_THAT([&] { std::rethrow_exception(o.error); },
                ThrowsError(ErrorKind::kCorruption, what));
  }
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Rewrites the item index of every data file of `dir` as version 3 (one
// table of 64-byte entries: distckpt before 2026-11-28).
void RewriteAsVersion3(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".distcp") continue;
    const std::string path = entry.path().string();
    const std::string v4 = ReadBytes(path);
    const auto bytes = std::as_bytes(std::span(v4.data(), v4.size()));
    const DcpIndexTrailer trailer =
        *ParseDcpIndexTrailer(bytes.last(kDcpIndexTrailerBytes), v4.size(), path);
    DcpIndexWriter writer;
    for (const DcpIndexEntry& e :
         ParseDcpIndexTable(bytes.subspan(trailer.table_offset,
                                          v4.size() - kDcpIndexTrailerBytes - trailer.table_offset),
                            trailer, path)) {
      writer.Add(e, ParseDcpBlockCrcs(bytes.subspan(e.crcs_offset, DcpBlockCount(e) * 4)));
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << v4.substr(0, trailer.items_end) + writer.Finish(trailer.items_end, 3);
  }
}

TEST(SharedIndexTest, Version3TablesTooAreReadOnceBetweenTheRanks) {
  ScopedTempDir tmp;
  const std::string dir = SaveDcp(tmp.path());
  RewriteAsVersion3(dir);
  UnsharedEnv unshared;
  const uint64_t once = LoadThroughOneReader(dir, 4, &unshared);
  EXPECT_EQ(LoadSeparately(dir, 4, &unshared), once);
  EXPECT_EQ(LoadSeparately(dir, 4, Env::Default()), once);
  // A flipped byte in a table one rank read and sent: every rank refuses it.
  std::string file;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("__1_")) file = entry.path().string();
  }
  ASSERT_FALSE(file.empty());
  EXPECT_TRUE(ReadBytes(file).ends_with("DCPINDX3"));
  FlipByte(file, fs::file_size(file) - kDcpIndexTrailerBytes - 64 + 20);  // an entry's size
  for (Env* env : {static_cast<Env*>(&unshared), Env::Default()}) {
    SCOPED_TRACE(env->name());
    ExpectRefused(dir, file, "item index table", env);
  }
}

TEST(SharedIndexTest, AFlippedByteInASentPieceIsRefused) {
  UnsharedEnv unshared;
  for (Env* env : {static_cast<Env*>(&unshared), Env::Default()}) {
    SCOPED_TRACE(env->name());
    for (const char* piece : {"group", "directory", "trailer", "record"}) {
      SCOPED_TRACE(piece);
      ScopedTempDir tmp;
      const std::string dir = SaveDcp(tmp.path());
      // File 1 (rows or columns 3 to 5) is read by loading ranks 0 and 1.
      std::string file;
      for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().filename().string().starts_with("__1_")) file = entry.path().string();
      }
      ASSERT_FALSE(file.empty());
      const IndexLayout layout = LayoutOf(file);
      ASSERT_EQ(layout.groups.size(), 3u);
      const uint64_t size = fs::file_size(file);
      const std::string name(piece);
      if (name == "group") {
        FlipByte(file, layout.groups[1].begin + 9);  // a binding
        ExpectRefused(dir, file, "item index group 1", env);
      } else if (name == "directory") {
        FlipByte(file, layout.trailer.directory_offset + 40);  // group 1's first byte
        ExpectRefused(dir, file, "item index directory", env);
      } else if (name == "trailer") {
        FlipByte(file, size - kDcpIndexTrailerBytes + 24);  // the directory's hash
        ExpectRefused(dir, file, "item index directory", env);
      } else {
        // The first byte of the first item's record, which rank 0 reads.
        std::unique_ptr<RandomAccessFile> f = Env::Default()->NewRandomAccessFile(file);
        const DcpIndexGroup& g = layout.groups[0];
        std::vector<std::byte> bytes(g.end - g.begin);
        f->Read(g.begin, bytes);
        const uint64_t data = ParseDcpIndexGroup(bytes, g, layout.trailer, file)[0].data_offset;
        f.reset();
        FlipByte(file, data);
        ExpectRefused(dir, file, "mismatch", env);
      }
    }
  }
}

}  // namespace
}  // namespace distckpt
