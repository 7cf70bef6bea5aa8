// The storage seam (issue 38): every format's save, reshard load, overwrite,
// metadata reads and async save run on a MemoryEnv whose root does not exist
// on the real file system. A byte read or written around the Env would fail
// (no such directory) or leave the root behind on disk: neither happens.
#include "io/memory_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "engine/save_async.h"
#include "io/testing.h"
#include "strategy/async_queue.h"

namespace distckpt {
namespace {

constexpr int64_t kRows = 12, kCols = 4;

// Rank `part` of `parts` holds rows [part*kRows/parts, ...) of w[i][j] = salt + i*kCols + j.
Node RowsState(int part, int parts, float salt) {
  const int64_t rows = kRows / parts;
  Tensor t = Tensor::Empty(DType::kF32, {rows, kCols});
  for (int64_t i = 0; i < rows * kCols; ++i)
    t.data_as<float>()[i] = salt + static_cast<float>(part * rows * kCols + i);
  return Node(Dict{{"w", Node(ShardedTensor::FromRankOffsets("w", t, {{0, part, parts}}))},
                   {"step", Node(nlohmann::json(7))}});
}

// Loads columns [part*kCols/parts, ...) of every row and checks them.
void ExpectColumns(Env* env, const std::string& dir, int parts, float salt) {
  RunRanks(parts, [&](Communicator& comm) {
    const int64_t cols = kCols / parts;
    Node request(Dict{
        {"w", Node(ShardedTensor::FromRankOffsets("w", Tensor::Zeros(DType::kF32, {kRows, cols}),
                                                  {{1, comm.rank(), parts}}))}});
    LoadOptions options;
    options.env = env;
    LoadResult r = Load(request, dir, comm, options);
    const Tensor& t = r.state_dict.at("w").as<Tensor>();
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        ASSERT_EQ(t.At(i * cols + j), salt + static_cast<float>(i * kCols + comm.rank() * cols + j))
            << dir << " rank " << comm.rank() << " at " << i << "," << j;
      }
    }
  });
}

class MemoryEnvSeamTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryEnvSeamTest, EveryByteGoesThroughTheEnv) {
  const Format& format = FormatByName(GetParam());
  MemoryEnv mem;
  const std::string root = "/distckpt-memory-only-" + std::to_string(::getpid());
  ASSERT_FALSE(Env::Default()->FileExists(root));
  mem.CreateDirs(root);
  const std::string dir = root + "/ckpt";
  auto save = [&](float salt, bool overwrite) {
    RunRanks(4, [&](Communicator& comm) {
      SaveOptions options;
      options.env = &mem;
      options.format = &format;
      options.overwrite = overwrite;
      Save(RowsState(comm.rank(), 4, salt), dir, comm, options);
    });
  };
  save(0, false);
  // Detection names every DCP variant "dcp" (format.cc): the family must match.
  EXPECT_EQ(DetectFormat(&mem, dir).name().substr(0, 3), format.name().substr(0, 3));
  ExpectColumns(&mem, dir, 2, 0);
  Node metadata = LoadTensorsMetadata(dir, &mem);
  EXPECT_NE(metadata.get_if<Dict>(), nullptr);
  save(100, true);  // overwrite: staging and swap, in memory too
  ExpectColumns(&mem, dir, 4, 100);
  // Async: the writers run in the background, the commit in the finalize.
  const std::string async_dir = root + "/async";
  RunRanks(2, [&](Communicator& comm) {
    SaveOptions options;
    options.env = &mem;
    options.format = &format;
    AsyncSave async = SaveAsync(RowsState(comm.rank(), 2, 50), async_dir, comm, options);
    AsyncCallsQueue queue(comm, std::chrono::minutes(1));
    queue.Schedule(async.request);
    queue.MaybeFinalize(true);
  });
  ExpectColumns(&mem, async_dir, 1, 50);
  EXPECT_GT(mem.bytes_stored(), 2 * kRows * kCols * sizeof(float));
  EXPECT_FALSE(Env::Default()->FileExists(root)) << "bytes went around the Env";
}

INSTANTIATE_TEST_SUITE_P(Formats, MemoryEnvSeamTest,
                         ::testing::Values("native", "dcp", "dcp-1.13", "dcp-common-pt"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace distckpt
