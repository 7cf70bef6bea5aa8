// Load from an open reader (engine/load.h): a caller that reads the common
// state first and then loads opens the checkpoint once (half the metadata
// reads of LoadCommonStateDict(dir) + Load(dir)), and loads what Load(dir) loads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/metadata_api.h"
#include "engine/save.h"
#include "io/forwarding_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

// Counts the files opened for reading, by path.
class OpenCountingEnv : public ForwardingEnv {
 public:
  OpenCountingEnv() : ForwardingEnv(Env::Default()) {}
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++opens_[path];
    }
    return ForwardingEnv::NewRandomAccessFile(path);
  }
  // The most times any one file was opened.
  int MaxOpens() const {
    std::lock_guard<std::mutex> lock(mu_);
    int most = 0;
    for (const auto& [path, n] : opens_) most = std::max(most, n);
    return most;
  }
  std::string Dump() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [path, n] : opens_) out += path + " x" + std::to_string(n) + "\n";
    return out;
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    opens_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> opens_;
};

Node SavedState(int rank) {
  Tensor data = Tensor::Empty(DType::kF32, {2, 3});
  for (int64_t i = 0; i < 6; ++i) data.data_as<float>()[i] = static_cast<float>(rank * 6 + i);
  Dict d;
  d["w"] = Node(ShardedTensor::FromRankOffsets("w", data, {{0, rank, 2}}, {0}));
  d["step"] = Node(nlohmann::json(7));
  return Node(std::move(d));
}

Node Request() {
  ShardedTensor want;
  want.key = "w";
  want.dtype = DType::kF32;
  want.local_shape = want.global_shape = {4, 3};
  want.global_offset = {0, 0};
  want.axis_fragmentations = {1, 1};
  want.data = Tensor::Empty(DType::kF32, {4, 3});
  Dict d;
  d["w"] = Node(want);
  return Node(std::move(d));
}

TEST(LoadReaderTest, CommonStateThenLoadOpensTheCheckpointOnce) {
  ScopedTempDir tmp;
  RunRanks(2, [&](Communicator& comm) { Save(SavedState(comm.rank()), tmp.path(), comm); });
  OpenCountingEnv env;

  // By directory: the common state and the load each open the checkpoint.
  Node by_dir;
  RunRanks(1, [&](Communicator& comm) {
    EXPECT_EQ(LoadCommonStateDict(tmp.path(), &env).at("step").as<nlohmann::json>(), 7);
    LoadOptions options;
    options.env = &env;
    by_dir = Load(Request(), tmp.path(), comm, options).state_dict;
  });
  const int by_dir_opens = env.MaxOpens();

  env.Reset();
  Node by_reader;
  RunRanks(1, [&](Communicator& comm) {
    std::unique_ptr<CheckpointReader> reader = OpenCheckpoint(tmp.path(), &env);
    EXPECT_EQ(LoadCommonStateDict(*reader).at("step").as<nlohmann::json>(), 7);
    by_reader = Load(Request(), *reader, comm).state_dict;
  });
  // Opening a checkpoint reads its metadata file once or twice (detection,
  // then the reader); by directory the common state and the load each open it.
  const int by_reader_opens = env.MaxOpens();
  EXPECT_LE(by_reader_opens, 2) << env.Dump();
  EXPECT_EQ(by_dir_opens, 2 * by_reader_opens) << env.Dump();

  const Tensor& a = by_dir.at("w").as<Tensor>();
  const Tensor& b = by_reader.at("w").as<Tensor>();
  ASSERT_EQ(b.numel(), 12);
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(b.At(i), static_cast<double>(i)) << i;
    EXPECT_EQ(a.At(i), b.At(i)) << i;
  }
  EXPECT_EQ(by_reader.at("step").as<nlohmann::json>(), 7);
}

}  // namespace
}  // namespace distckpt
