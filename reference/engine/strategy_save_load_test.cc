// Save and Load with the strategies of strategy/ over thread ranks and real
// files: fully parallel save (each unique shard written once, balanced),
// fully parallel load (each shard read once per group; Megatron's
// TestCrossRanksReads, docs/megatron-semantics.md §9.2 rows 16-19, observed through the files
// each rank reads) and two-stage load.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/save.h"
#include "format/native/native_writer.h"
#include "io/testing.h"
#include "strategy/testing.h"

namespace distckpt {
namespace {

namespace fs = std::filesystem;

// Records the (file name, offset) of every read, then passes it on.
class RecordingEnv : public ForwardingEnv {
 public:
  RecordingEnv() : ForwardingEnv(Env::Default()) {}
  struct ReadAt {
    std::string file;
    uint64_t offset;
  };
  std::unique_ptr<RandomAccessFile> NewRandomAccessFile(const std::string& path) override {
    return std::make_unique<File>(target()->NewRandomAccessFile(path), this);
  }
  std::vector<ReadAt> reads() const {
    std::lock_guard lock(mu_);
    return reads_;
  }

 private:
  class File : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> base, RecordingEnv* env)
        : base_(std::move(base)), env_(env) {}
    void Read(uint64_t offset, std::span<std::byte> dst) const override {
      {
        std::lock_guard lock(env_->mu_);
        env_->reads_.push_back({fs::path(base_->path()).filename().string(), offset});
      }
      base_->Read(offset, dst);
    }
    uint64_t size() const override { return base_->size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    std::unique_ptr<RandomAccessFile> base_;
    RecordingEnv* env_;
  };

  mutable std::mutex mu_;
  std::vector<ReadAt> reads_;
};

// A 1-d f32 tensor of `n` elements, value = global index + base, split in
// `parts` along axis 0; part `part`.
ShardedTensor Arange(const std::string& key, int64_t n, int part, int parts, int64_t replica,
                     float base = 0, bool with_data = true) {
  const int64_t local = n / parts;
  Tensor data = Tensor::Empty(DType::kF32, {local});
  for (int64_t i = 0; i < local; ++i)
    data.data_as<float>()[i] = base + static_cast<float>(part * local + i);
  if (!with_data) data = Tensor();
  ShardedTensor t =
      ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, {local}, {{0, part, parts}}, {replica});
  t.data = data;
  return t;
}

void ExpectArange(const Tensor& got, const ShardedTensor& want, float base = 0) {
  ASSERT_EQ(got.numel(), Volume(want.local_shape)) << want.key;
  for (int64_t i = 0; i < got.numel(); ++i) {
    ASSERT_EQ(got.At(i), base + static_cast<float>(want.global_offset[0] + i))
        << want.key << " at " << i;
  }
}

// A model on tp x dp ranks (rank = tp + tp_size * dp), replicated over DP:
// six TP-split tensors of different sizes and two replicated ones.
std::vector<ShardedTensor> ReplicatedModel(int rank, int tp_size, bool with_data) {
  const int tp = rank % tp_size, dp = rank / tp_size;
  std::vector<ShardedTensor> shards;
  const int64_t sizes[] = {4096, 2048, 1536, 1024, 640, 512};
  for (int i = 0; i < 6; ++i) {
    shards.push_back(Arange("w" + std::to_string(i), sizes[i] * tp_size, tp, tp_size, dp,
                            1000.0f * i, with_data));
  }
  shards.push_back(Arange("norm", 256, 0, 1, rank, 7, with_data));
  shards.push_back(Arange("bias", 96, 0, 1, rank, 9, with_data));
  return shards;
}

Node AsDict(const std::vector<ShardedTensor>& shards) {
  Dict d;
  for (const ShardedTensor& t : shards) d[t.key] = Node(t);
  return Node(std::move(d));
}

std::unique_ptr<Communicator> DpGroup(Communicator& comm, int tp_size) {
  return comm.Split(comm.rank() % tp_size, comm.rank());
}

// Bytes of each distinct stored chunk, and whether any chunk is stored twice.
uint64_t StoredBytes(const std::string& dir, bool* duplicate) {
  auto reader = NativeFormat().OpenReader(Env::Default(), dir);
  uint64_t total = 0;
  *duplicate = false;
  for (const auto& [key, tensor] : reader->metadata().tensors) {
    std::set<Shape> offsets;
    for (const StoredChunk& c : tensor.chunks) {
      total += c.length;
      *duplicate |= !offsets.insert(c.box.offset).second;
    }
  }
  return total;
}

TEST(FullyParallelSaveTest, WritesEachShardOnceSpreadOverTheDpGroup) {
  ScopedTempDir tmp;
  constexpr int kTp = 2, kWorld = 8;
  for (bool fully_parallel : {false, true}) {
    const std::string dir = tmp.path() + (fully_parallel ? "/fp" : "/plain");
    std::vector<uint64_t> written(kWorld);
    RunRanks(kWorld, [&](Communicator& comm) {
      auto dp = DpGroup(comm, kTp);
      SaveOptions options;
      if (fully_parallel) options.strategy = SaveStrategy::FullyParallel(dp.get());
      written[comm.rank()] =
          Save(AsDict(ReplicatedModel(comm.rank(), kTp, true)), dir, comm, options).bytes_written;
    });
    bool duplicate = true;
    uint64_t stored = StoredBytes(dir, &duplicate);
    EXPECT_FALSE(duplicate);
    uint64_t unique = (4096 + 2048 + 1536 + 1024 + 640 + 512) * kTp * 4 + (256 + 96) * 4;
    EXPECT_EQ(stored, unique);
    uint64_t sum = 0, busiest = 0;
    for (uint64_t b : written) {
      sum += b;
      busiest = std::max(busiest, b);
    }
    EXPECT_EQ(sum, unique);
    if (fully_parallel) {
      // Greedy over each DP group of 4, largest first: w0 (16 KiB) alone on
      // group rank 0; norm and bias go to the least loaded rank 6.
      EXPECT_EQ(written[0], 4096u * 4);
      EXPECT_EQ(written[6], (1024u + 640 + 256 + 96) * 4);
      EXPECT_EQ(written[7], (1024u + 640) * 4);
      for (int r = 2; r < kWorld; ++r) EXPECT_GT(written[r], 0u) << r;
    } else {
      EXPECT_EQ(written[2], 0u);  // DP ranks > 0 write nothing
    }
    // Loads back under another layout either way.
    RunRanks(4, [&](Communicator& comm) {
      std::vector<ShardedTensor> want{Arange("w1", 4096, comm.rank(), 4, 0, 1000, false),
                                      Arange("norm", 256, 0, 1, comm.rank(), 7, false)};
      LoadResult r = Load(AsDict(want), dir, comm);
      ExpectArange(r.state_dict.at("w1").as<Tensor>(), want[0], 1000);
      ExpectArange(r.state_dict.at("norm").as<Tensor>(), want[1], 7);
    });
  }
}

struct LoadRun {
  std::vector<uint64_t> bytes_read;
  std::vector<ExchangeStats> exchange;
};

LoadRun LoadModel(const std::string& dir, int world, int tp_size, const LoadOptions& base) {
  LoadRun run{std::vector<uint64_t>(world), std::vector<ExchangeStats>(world)};
  RunRanks(world, [&](Communicator& comm) {
    auto dp = DpGroup(comm, tp_size);
    LoadOptions options = base;
    options.strategy.group = dp.get();
    std::vector<ShardedTensor> want = ReplicatedModel(comm.rank(), tp_size, false);
    LoadResult r = Load(AsDict(want), dir, comm, options);
    for (size_t i = 0; i < want.size(); ++i) {
      ExpectArange(r.state_dict.at(want[i].key).as<Tensor>(), want[i],
                   i < 6    ? 1000.0f * i
                   : i == 6 ? 7
                            : 9);
    }
    run.bytes_read[comm.rank()] = r.summary.bytes_read;
    run.exchange[comm.rank()] = r.summary.exchange;
  });
  return run;
}

TEST(FullyParallelLoadTest, ReadsEachShardOncePerGroupWithEitherExchange) {
  ScopedTempDir tmp;
  RunRanks(4, [&](Communicator& comm) {
    Save(AsDict(ReplicatedModel(comm.rank(), 2, true)), tmp.path(), comm);
  });
  const uint64_t unique = (4096 + 2048 + 1536 + 1024 + 640 + 512) * 2 * 4 + (256 + 96) * 4;
  LoadRun plain = LoadModel(tmp.path(), 8, 2, {});
  uint64_t plain_total = 0;
  for (uint64_t b : plain.bytes_read) plain_total += b;
  EXPECT_EQ(plain_total, 4 * (unique - (256 + 96) * 4) + 8 * (256 + 96) * 4);  // every replica read
  for (ExchangeAlgorithm algorithm :
       {ExchangeAlgorithm::kBroadcast, ExchangeAlgorithm::kGatherRounds}) {
    LoadOptions options;
    options.strategy = LoadStrategy::FullyParallel(nullptr, algorithm);  // group: LoadModel's
    LoadRun fp = LoadModel(tmp.path(), 8, 2, options);
    uint64_t total = 0, largest_shard = 4096 * 4;
    for (int r = 0; r < 8; ++r) {
      total += fp.bytes_read[r];
      if (algorithm == ExchangeAlgorithm::kBroadcast) {
        EXPECT_LE(fp.exchange[r].peak_buffer_bytes, largest_shard + 2) << r;
      }
    }
    // Each DP group reads its TP half once; both groups read the replicated tensors.
    EXPECT_EQ(total, unique + (256 + 96) * 4) << ExchangeAlgorithmName(algorithm);
  }
}

TEST(TwoStageLoadTest, LowestDpRankReadsAndBroadcastsOneShardAtATime) {
  ScopedTempDir tmp;
  RunRanks(2, [&](Communicator& comm) {
    Save(AsDict(ReplicatedModel(comm.rank(), 2, true)), tmp.path(), comm);
  });
  LoadOptions options;
  options.strategy = LoadStrategy::TwoStage();  // group: LoadModel's
  LoadRun run = LoadModel(tmp.path(), 8, 2, options);
  for (int r = 0; r < 8; ++r) {
    if (r >= 2) {
      EXPECT_EQ(run.bytes_read[r], 0u) << "DP rank > 0 reads nothing: rank " << r;
    }
    EXPECT_LE(run.exchange[r].peak_buffer_bytes, 4096u * 4 + 2) << r;
    EXPECT_EQ(run.exchange[r].collectives, 8u) << r;  // one broadcast per shard its group shares
  }
}

// TestCrossRanksReads: one-element shards placed on (tp, dp) holders, the
// first one main; saved and loaded fully parallel along DP. Returns, per
// rank, key -> rank whose file it read.
using Placement = std::map<std::string, std::vector<std::pair<int, int>>>;
using ReadsByRank = std::map<int, std::map<std::string, int>>;

void CrossRankReads(int tp_size, const Placement& placement, ReadsByRank* same,
                    ReadsByRank* cross) {
  ScopedTempDir tmp;
  constexpr int kWorld = 8;
  auto state = [&](int rank) {
    std::vector<ShardedTensor> shards;
    for (const auto& [name, holders] : placement) {
      for (const auto& h : holders) {
        if (h.first + tp_size * h.second != rank) continue;
        shards.push_back(Arange(name, 1, 0, 1, h == holders[0] ? 0 : 1, name[0]));
      }
    }
    return AsDict(shards);
  };
  std::vector<RecordingEnv> envs(kWorld);
  RunRanks(kWorld, [&](Communicator& comm) {
    auto dp = DpGroup(comm, tp_size);
    SaveOptions save;
    save.strategy = SaveStrategy::FullyParallel(dp.get());
    Save(state(comm.rank()), tmp.path(), comm, save);
    LoadOptions load;
    load.strategy = LoadStrategy::FullyParallel(dp.get());
    load.env = &envs[comm.rank()];
    LoadResult r = Load(state(comm.rank()), tmp.path(), comm, load);
    for (const auto& [name, _] : r.state_dict.as<Dict>()) {
      EXPECT_EQ(r.state_dict.at(name).as<Tensor>().At(0), name[0]) << name;
    }
  });
  auto reader = NativeFormat().OpenReader(Env::Default(), tmp.path());
  for (int rank = 0; rank < kWorld; ++rank) {
    for (const RecordingEnv::ReadAt& read : envs[rank].reads()) {
      if (!IsDataFileName(read.file)) continue;
      for (const auto& [key, tensor] : reader->metadata().tensors) {
        for (const StoredChunk& c : tensor.chunks) {
          if (c.file == read.file && c.offset == read.offset) {
            (c.writer_rank == rank ? *same : *cross)[rank][key] = c.writer_rank;
          }
        }
      }
    }
  }
}

TEST(FullyParallelLoadTest, CrossRanksReadsFullDp) {
  std::vector<std::pair<int, int>> all;
  for (int dp = 0; dp < 8; ++dp) all.emplace_back(0, dp);
  ReadsByRank same, cross;
  CrossRankReads(1, {{"a", {{0, 0}}}, {"b", {{0, 1}}}, {"c", all}}, &same, &cross);
  EXPECT_TRUE(cross.empty());
  EXPECT_EQ(same, (ReadsByRank{{0, {{"a", 0}}}, {1, {{"b", 1}}}, {2, {{"c", 2}}}}));
}

TEST(FullyParallelLoadTest, CrossDpAccessDoesNotDisturbTheDistribution) {
  std::vector<std::pair<int, int>> all;
  for (int tp = 0; tp < 2; ++tp) {
    for (int dp = 0; dp < 4; ++dp) all.emplace_back(tp, dp);
  }
  ReadsByRank same, cross;
  CrossRankReads(2,
                 {{"a", {{0, 0}}},
                  {"b", all},
                  {"c", {{0, 0}, {0, 1}, {0, 2}}},
                  {"d", {{1, 0}, {0, 0}, {1, 3}}},
                  {"e", {{1, 0}, {1, 2}}},
                  {"f", {{1, 0}, {0, 0}, {1, 2}}},
                  {"g", {{1, 3}}}},
                 &same, &cross);
  EXPECT_EQ(cross, (ReadsByRank{{0, {{"d", 1}, {"f", 1}}}, {3, {{"b", 4}}}}));
  EXPECT_EQ(same, (ReadsByRank{{0, {{"a", 0}}},
                               {1, {{"d", 1}, {"f", 1}}},
                               {2, {{"c", 2}}},
                               {4, {{"b", 4}}},
                               {5, {{"e", 5}}},
                               {7, {{"g", 7}}}}));
}

}  // namespace
}  // namespace distckpt
