// verl per-rank FSDP files written by real torch 2.6 (fully_shard on 4 gloo
// ranks, fixtures/verl/make_verl_fixture.py): read, converted and loaded
// under 3 and 6 ranks, every value equal to torch's full state dict.
#include "engine/verl_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "comm/thread_world.h"
#include "core/error_testing.h"
#include "engine/load.h"
#include "format/dcp/dcp_format.h"
#include "format/dcp/torch_save.h"
#include "format/dcp/torch_zip.h"
#include "format/format.h"
#include "fsdp/layout.h"
#include "io/memory_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// The committed fixture, or a verl checkpoint of world size 4 written by
// make_verl_fixture.py (scenarios/peer/verl_peer_test.sh sets this).
const std::string kFixture = std::getenv("DISTCKPT_VERL_CHECKPOINT")
                                 ? std::getenv("DISTCKPT_VERL_CHECKPOINT")
                                 : std::string(DISTCKPT_VERL_FIXTURES) + "/fsdp2-w4";

// torch's full state dict (expected/*.pt): key -> row-major values.
struct Expected {
  Shape shape;
  std::vector<double> values;
};
std::map<std::string, Expected> ReadExpected(const std::string& file, const std::string& prefix) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string bytes = buffer.str();
  nlohmann::json j = TorchLoadJson(ZipReader(bytes, file));
  std::map<std::string, Expected> out;
  for (const auto& [key, v] : j.items()) {
    if (!v.is_object() || !v.contains("__tensor__")) continue;
    const nlohmann::json& t = v["__tensor__"];
    if (t["shape"].empty()) continue;  // the step scalars
    out[prefix + key] = {t["shape"].get<Shape>(), t["data"].get<std::vector<double>>()};
  }
  return out;
}

std::map<std::string, Expected> AllExpected() {
  std::map<std::string, Expected> all = ReadExpected(kFixture + "/expected/model.pt", "");
  // expected/optim.pt keys are "<fqn>.<state>"; ours "optimizer.state.<state>.<fqn>".
  for (auto& [key, e] : ReadExpected(kFixture + "/expected/optim.pt", "")) {
    const size_t dot = key.rfind('.');
    all[fmt::format("optimizer.state.{}.{}", key.substr(dot + 1), key.substr(0, dot))] = e;
  }
  return all;
}

// The values of `t` (f32) at global offset `offset` must equal `e`'s.
void ExpectSlice(const std::string& key, const Expected& e, const Shape& offset, const Tensor& t) {
  ASSERT_EQ(t.dtype(), DType::kF32) << key;
  const Shape& local = t.shape();
  ASSERT_EQ(local.size(), e.shape.size()) << key;
  const float* data = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t rem = i, global = 0, stride = 1;
    for (size_t d = local.size(); d-- > 0;) {
      global += (offset[d] + rem % local[d]) * stride;
      rem /= local[d];
      stride *= e.shape[d];
    }
    ASSERT_EQ(static_cast<double>(data[i]), e.values[static_cast<size_t>(global)])
        << key << " element " << i;
  }
}

TEST(VerlFilesTest, EveryRankReadsTorchsShardsAndTheyTileTheFullStateDict) {
  ASSERT_EQ(VerlWorldSize(kFixture), 4);
  const std::map<std::string, Expected> expected = AllExpected();
  std::map<std::string, int64_t> covered;
  int empty = 0;
  for (int r = 0; r < 4; ++r) {
    VerlRankState s = ReadVerlRank(kFixture, 4, r);
    EXPECT_EQ(s.model_keys.front(), "embed.weight");
    EXPECT_TRUE(s.common["optimizer"]["param_groups"].is_array());
    EXPECT_EQ(s.common["optimizer"]["state"]["embed.weight"]["step"], 1.0);
    EXPECT_TRUE(s.common["extra_state"].contains("rng"));
    for (const ShardedTensor& t : s.tensors) {
      auto it = expected.find(t.key);
      ASSERT_NE(it, expected.end()) << t.key;
      EXPECT_EQ(t.global_shape, it->second.shape) << t.key;
      // FSDP2: torch.chunk rows on dim 0.
      FlatRange rows = Fsdp2Rows(t.global_shape[0], 4, r);
      EXPECT_EQ(t.global_offset[0], rows.start) << t.key;
      EXPECT_EQ(t.local_shape[0], rows.size()) << t.key;
      empty += t.local_shape[0] == 0;
      ExpectSlice(t.key, it->second, t.global_offset, t.data);
      covered[t.key] += t.data.numel();
    }
  }
  EXPECT_GT(empty, 0);  // (3, 10) on 4 ranks: rank 3 holds no rows
  ASSERT_EQ(covered.size(), expected.size());
  for (const auto& [key, n] : covered) EXPECT_EQ(n, Volume(expected.at(key).shape)) << key;
}

// Converted once, loaded by FSDP2 rows under 3 and 6 ranks (and whole on 1).
TEST(VerlConvertTest, LoadsUnderOtherWorldSizesEqualToTorchsFullStateDict) {
  for (const Format* format : {&NativeFormat(), &DcpFormat()}) {
    ScopedTempDir dir;
    SaveOptions options;
    options.format = format;
    const std::string dst = dir.path() + "/ckpt";
    ASSERT_EQ(ConvertVerlCheckpoint(kFixture, dst, options), 4);
    const std::map<std::string, Expected> expected = AllExpected();
    for (int world : {3, 6, 1}) {
      RunRanks(world, [&](Communicator& comm) {
        Dict model, optim;
        std::map<std::string, Shape> offsets;
        for (const auto& [key, e] : expected) {
          ShardedTensor t;
          t.key = key;
          t.dtype = DType::kF32;
          t.global_shape = e.shape;
          t.global_offset = Shape(e.shape.size(), 0);
          t.local_shape = e.shape;
          FlatRange rows = Fsdp2Rows(e.shape[0], world, comm.rank());
          t.global_offset[0] = rows.start;
          t.local_shape[0] = rows.size();
          t.replica_id = {0, 0, 0};
          offsets[key] = t.global_offset;
          if (key.starts_with("optimizer.")) {
            optim[key] = Node(t);
          } else {
            model[key] = Node(t);
          }
        }
        Dict root;
        root["model"] = Node(std::move(model));
        root["optim"] = Node(std::move(optim));
        LoadResult result = Load(Node(std::move(root)), dst, comm);
        const Dict& loaded = result.state_dict.as<Dict>();
        for (const char* group : {"model", "optim"}) {
          for (const auto& [key, node] : loaded.at(group).as<Dict>()) {
            ExpectSlice(key, expected.at(key), offsets.at(key), node.as<Tensor>());
          }
        }
        // Common state: torch's one param group (AdamW, lr 0.01), kept as a list.
        const Node& groups = loaded.at("optimizer").at("param_groups");
        ASSERT_TRUE(groups.is<List>());
        ASSERT_EQ(groups.as<List>().size(), 1u);
        EXPECT_EQ(groups.as<List>()[0].at("lr").as<nlohmann::json>(), 0.01);
      });
    }
  }
}

TEST(VerlFilesTest, RefusesMissingAndForeignFiles) {
  ScopedTempDir dir;
  EXPECT_THAT([&] { VerlWorldSize(dir.path()); },
              ThrowsError(ErrorKind::kIncomplete, "not a verl FSDP checkpoint"));
  fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
  fs::remove(fs::path(dir.path()) / VerlModelFile(4, 2));
  EXPECT_THAT([&] { ReadVerlRank(dir.path(), 4, 2); },
              ThrowsError(ErrorKind::kIncomplete, "model_world_size_4_rank_2.pt"));
  // A file that is not a torch.save archive.
  std::ofstream(fs::path(dir.path()) / VerlModelFile(4, 1)) << "not a zip";
  EXPECT_THAT([&] { ReadVerlRank(dir.path(), 4, 1); },
              ThrowsError(ErrorKind::kCorruption, "model_world_size_4_rank_1.pt"));
  {
    std::ofstream(fs::path(dir.path()) / "fsdp_config.json")
        << R"({"FSDP_version": 2, "world_size": 8})";
  }
  EXPECT_THAT([&] { VerlWorldSize(dir.path()); },
              ThrowsError(ErrorKind::kCorruption, "world_size 8"));
  // 2^32 + 4 is not 4 (get<int>() truncated it to the model files' world).
  std::ofstream(fs::path(dir.path()) / "fsdp_config.json", std::ios::trunc)
      << R"({"FSDP_version": 2, "world_size": 4294967300})";
  EXPECT_THAT([&] { VerlWorldSize(dir.path()); },
              ThrowsError(ErrorKind::kCorruption, "world_size 4294967300 but"));
  std::ofstream(fs::path(dir.path()) / "fsdp_config.json", std::ios::trunc)
      << R"({"FSDP_version": 2, "world_size": 18446744073709551615})";
  EXPECT_THAT([&] { VerlWorldSize(dir.path()); },
              ThrowsError(ErrorKind::kCorruption,
                          "fsdp_config.json: world_size: 18446744073709551615 is not an integer"));
}

// The device mesh is read from the file: a mesh of size 0 (before: a
// division by zero in torch.chunk's arithmetic) or a coordinate outside it
// is refused naming the file and tensor.
TEST(VerlFilesTest, RefusesAnEmptyMeshOrACoordinateOutsideIt) {
  using namespace std::string_literals;
  const std::string fixture = std::string(DISTCKPT_VERL_FIXTURES) + "/fsdp2-w4";  // committed
  const std::string name = VerlModelFile(4, 2);
  std::ifstream in(fixture + "/" + name, std::ios::binary);
  const std::string original{std::istreambuf_iterator<char>(in), {}};
  // data.pkl holds the first mesh tensor's size as BININT1 0, BININT1 4,
  // TUPLE1, BINPUT 43 (storage offset 0, size (4,)): made (0,) or (2,),
  // where rank 2's coordinate 2 is outside.
  const auto resaved = [&](const std::string& pattern, size_t at, char value) {
    ZipReader zip(original, name);
    return ZipToString([&](ZipWriter& out) {
      for (const ZipReader::Entry& e : zip.entries()) {
        std::string bytes = zip.ReadRecord(e);
        if (e.name == "data.pkl") {
          const size_t i = bytes.find(pattern);
          EXPECT_NE(i, std::string::npos) << "fixture's data.pkl changed";
          if (i != std::string::npos) bytes[i + at] = value;
        }
        out.AddRecord(e.name, bytes);
      }
    });
  };
  for (const auto& [bytes, message] :
       {std::pair{resaved("K\x00K\x04\x85q+"s, 3, '\0'), "outside device mesh (0,)"s},
        std::pair{resaved("K\x00K\x04\x85q+"s, 3, '\x02'), "outside device mesh (2,)"s}}) {
    ScopedTempDir dir;
    fs::copy(fixture, dir.path(), fs::copy_options::recursive);
    std::ofstream(dir.path() + "/" + name, std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_THAT([&] { ReadVerlRank(dir.path(), 4, 2); },
                ThrowsError(ErrorKind::kCorruption, name + ": '"));
    EXPECT_THAT([&] { ReadVerlRank(dir.path(), 4, 2); },
                ThrowsError(ErrorKind::kCorruption, message));
  }
}

// The verl reader reads through the Env (issue 38): the fixture copied into a
// MemoryEnv under a root absent from disk reads and converts the same.
TEST(VerlFilesTest, ReadsAndConvertsThroughAMemoryEnv) {
  MemoryEnv mem;
  const std::string src = "/distckpt-memory-verl/src";
  mem.CreateDirs(src);
  for (const fs::directory_entry& e : fs::directory_iterator(kFixture)) {
    if (!e.is_regular_file()) continue;
    WriteFileAtomic(&mem, JoinPath(src, e.path().filename().string()),
                    ReadFileToString(Env::Default(), e.path().string()));
  }
  ASSERT_EQ(VerlWorldSize(src, &mem), 4);
  EXPECT_THAT([&] { VerlWorldSize(src); }, ThrowsError(ErrorKind::kIncomplete, src));
  const std::map<std::string, Expected> expected = AllExpected();
  for (int r = 0; r < 4; ++r) {
    VerlRankState s = ReadVerlRank(src, 4, r, &mem);
    VerlRankState disk = ReadVerlRank(kFixture, 4, r);
    ASSERT_EQ(s.tensors.size(), disk.tensors.size());
    EXPECT_EQ(s.common, disk.common);
    for (const ShardedTensor& t : s.tensors)
      ExpectSlice(t.key, expected.at(t.key), t.global_offset, t.data);
  }
  SaveOptions options;
  options.env = &mem;
  EXPECT_EQ(ConvertVerlCheckpoint(src, "/distckpt-memory-verl/ckpt", options), 4);
  EXPECT_EQ(DetectFormat(&mem, "/distckpt-memory-verl/ckpt").name(), "native");
  EXPECT_FALSE(Env::Default()->FileExists("/distckpt-memory-verl"));
}

}  // namespace
}  // namespace distckpt
