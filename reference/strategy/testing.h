// Test helpers for strategy/ and the engine tests that use it: a
// Communicator that counts the collectives it forwards, a fake storage read
// (Megatron's MockLoadStrategy) that fills every tensor with the reading
// rank's number and records the keys it read, Megatron's fully parallel test
// state dict, per-rank error capture, and Envs that record reads or hold
// writes back until released.
//
// Thread-safety: a CountingCommunicator is used by its own rank only, like
// the communicator it wraps.
#ifndef DISTCKPT_STRATEGY_TESTING_H_
#define DISTCKPT_STRATEGY_TESTING_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "comm/communicator.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "io/env.h"
#include "io/forwarding_env.h"
#include "mapping/dict_utils.h"
#include "strategy/strategy.h"

namespace distckpt {

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& base) : base_(base) {}

  int rank() const override { return base_.rank(); }
  int size() const override { return base_.size(); }
  void Barrier() override {
    ++calls["Barrier"];
    base_.Barrier();
  }
  void Broadcast(std::string& bytes, int root) override {
    ++calls["Broadcast"];
    base_.Broadcast(bytes, root);
    bytes_moved += bytes.size();
  }
  void BroadcastBytes(std::span<std::byte> bytes, int root) override {
    ++calls["BroadcastBytes"];
    base_.BroadcastBytes(bytes, root);
    bytes_moved += bytes.size();
  }
  std::vector<std::string> Gather(const std::string& bytes, int root) override {
    ++calls["Gather"];
    bytes_moved += bytes.size();
    return base_.Gather(bytes, root);
  }
  std::vector<std::string> AllGather(const std::string& bytes) override {
    ++calls["AllGather"];
    bytes_moved += bytes.size();
    return base_.AllGather(bytes);
  }
  void AllReduce(std::span<int64_t> values, ReduceOp op) override {
    ++calls["AllReduce"];
    base_.AllReduce(values, op);
  }
  void AllReduceBytes(std::span<uint8_t> values, ReduceOp op) override {
    ++calls["AllReduceBytes"];
    base_.AllReduceBytes(values, op);
  }
  std::unique_ptr<Communicator> Split(int color, int key) override {
    ++calls["Split"];
    return base_.Split(color, key);
  }

  int count(const std::string& op) const {
    auto it = calls.find(op);
    return it == calls.end() ? 0 : it->second;
  }
  void Reset() {
    calls.clear();
    bytes_moved = 0;
  }

  std::map<std::string, int> calls;  // by collective name
  uint64_t bytes_moved = 0;          // payload bytes this rank sent or received as root

 private:
  Communicator& base_;
};

// A ReadShardsFn that fills tensors with `value` and returns objects as
// [value]; the keys it reads go to `*keys`.
inline ReadShardsFn FillingRead(double value, std::set<std::string>* keys) {
  return [value, keys](const Node& sharded) {
    Node out = sharded;
    ForEachLeaf(out, [&](const NodePath&, Node& leaf) {
      if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
        if (keys) keys->insert(t->key);
        Tensor data = t->data.defined() ? t->data : Tensor::Empty(t->dtype, t->DataShape());
        for (int64_t i = 0; i < data.numel(); ++i)
          StoreFromDouble(data.data(), data.dtype(), i, value);
        leaf = Node(data);
      } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
        if (keys) keys->insert(o->key);
        leaf = Node(nlohmann::json::array({value}));
      }
    });
    return out;
  };
}

// TestFullyParallelSaveAndLoad.get_sharded_state_dict on Megatron's world
// of 8 ranks under TP2 (DP4), rank = tp + 2 * dp, metadata only: key_TP_repl1
// and key_TP_repl2 ones(10) split over TP (replica = dp), keyB ones(20) split
// over the 8 ranks, keyC and keyE ones(100), keyD ones(1000) replicated
// (replica = rank). All f32.
inline std::vector<ShardedTensor> MegatronFullyParallelShards(int rank) {
  const int tp = rank % 2, dp = rank / 2;
  auto meta = [](const std::string& key, int64_t n, std::vector<RankOffset> offsets,
                 int64_t replica) {
    return ShardedTensor::FromRankOffsetsMeta(key, DType::kF32, {n}, offsets, {replica});
  };
  return {meta("key_TP_repl1", 10, {{0, tp, 2}}, dp),
          meta("key_TP_repl2", 10, {{0, tp, 2}}, dp),
          meta("keyB", 20, {{0, rank, 8}}, 0),
          meta("keyC", 100, {}, rank),
          meta("keyD", 1000, {}, rank),
          meta("keyE", 100, {}, rank)};
}

// Runs `fn` on `world` thread ranks; each rank's CheckpointError message, ""
// where it threw none.
inline std::vector<std::string> ErrorMessagesOnRanks(int world,
                                                     const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> messages(world);
  RunRanks(world, [&](Communicator& comm) {
    try {
      fn(comm);
    } catch (const CheckpointError& e) {
      messages[comm.rank()] = e.what();
    }
  });
  return messages;
}

// Appends to files written through it wait while the gate is closed (a hung
// writer); Open() lets them through. Open it, and wait until no file is
// open, before it goes.
class GatedEnv : public ForwardingEnv {
 public:
  GatedEnv() : ForwardingEnv(Env::Default()) {}
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    return std::make_unique<File>(target()->NewWritableFile(path), this);
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void WaitUntilNoFileOpen() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return files_ == 0; });
  }
  void WaitUntilAnAppendWaits() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }

 private:
  class File : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> base, GatedEnv* env) : base_(std::move(base)), env_(env) {
      std::lock_guard lock(env_->mu_);
      ++env_->files_;
    }
    ~File() override {
      std::lock_guard lock(env_->mu_);
      --env_->files_;
      env_->cv_.notify_all();
    }
    void Append(std::span<const std::byte> data) override {
      std::unique_lock lock(env_->mu_);
      ++env_->waiting_;
      env_->cv_.notify_all();
      env_->cv_.wait(lock, [&] { return env_->open_; });
      --env_->waiting_;
      lock.unlock();
      base_->Append(data);
    }
    void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
      base_->WriteAt(offset, data);
    }
    void Sync() override { base_->Sync(); }
    void Close() override { base_->Close(); }
    uint64_t size() const override { return base_->size(); }

   private:
    std::unique_ptr<WritableFile> base_;
    GatedEnv* env_;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int files_ = 0;    // File objects alive
  int waiting_ = 0;  // Appends held at the gate
};

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_TESTING_H_
