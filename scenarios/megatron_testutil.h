// Helpers shared by the ports of Megatron-Core's dist_checkpointing unit
// tests (scenarios/megatron_*_test.cc): Megatron's 8-rank world and its
// parallel layouts, scratch checkpoint directories, per-rank error capture
// and small accessors into loaded state dicts. Every check reports with
// EXPECT_* (never ASSERT_*), so a rank thread whose check fails still joins
// the remaining collectives.
//
// Thread-safety: ScratchDir is used from the test's main thread; the other
// functions are pure or touch only their arguments (GoogleTest's EXPECT_* is
// thread-safe), so rank threads may call them concurrently.
#ifndef DISTCKPT_SCENARIOS_MEGATRON_TESTUTIL_H_
#define DISTCKPT_SCENARIOS_MEGATRON_TESTUTIL_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "mapping/state_dict.h"
#include "topology/topology.h"

namespace distckpt::megatron {

// Megatron's unit tests run under `torchrun --nproc_per_node 8`.
inline constexpr int kWorldSize = 8;

// Utils.initialize_model_parallel(tp, pp, order=...) over kWorldSize ranks
// (dp = 8 / (tp * pp)); an empty order is Megatron's default tp-cp-ep-dp-pp.
Topology ModelParallel(int tp, int pp, std::string_view order = "");

// A fresh directory under ::testing::TempDir() (mkdtemp), removed with
// everything in it on destruction. Checkpoints go to Sub(name), which save
// creates.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view name);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(std::string_view name) const;

 private:
  std::string path_;
};

// Runs `fn` on kWorldSize ranks and returns each rank's CheckpointError
// (nullopt where it threw none). Any other exception is rethrown.
std::vector<std::optional<CheckpointError>> ErrorsOnRanks(
    const std::function<void(Communicator&)>& fn);

// Expects every rank to have thrown a CheckpointError of `kind` whose message
// holds each of `present` and none of `absent`. Returns rank 0's message.
std::string ExpectErrorOnEveryRank(const std::vector<std::optional<CheckpointError>>& errors,
                                   ErrorKind kind, const std::vector<std::string>& present,
                                   const std::vector<std::string>& absent = {});

// A tensor of `shape` with every element `value`.
Tensor Full(DType dtype, Shape shape, double value);
// The dict keys of `node` (empty for a non-dict).
std::set<std::string> KeysOf(const Node& node);
// The Tensor at `key` of the dict `state_dict`; an undefined Tensor and a
// test failure when there is none.
Tensor TensorAt(const Node& state_dict, const std::string& key);
// The elements (as doubles) of the Tensor at `key` of the dict `state_dict`;
// empty and a test failure when there is none.
std::vector<double> ValuesAt(const Node& state_dict, const std::string& key);
// The JSON value at `key` of the dict `state_dict`; null and a test failure
// when there is none.
nlohmann::json JsonAt(const Node& state_dict, const std::string& key);

// The base state dict of Megatron's TestNonStrictLoad (docs/megatron-semantics.md §9.2 rows
// 68-71) on `rank`: TenA arange(2) (replica rank), TenB arange(3) split over the ranks,
// TenC arange(3) (replica 7 - rank), ObjA list(range(10)) (replica rank),
// ObjB {rank + 7} at (0, rank) of (1, 8). Megatron's set {rank + 7} is the
// JSON array [rank + 7]; tensors are int64 like torch.arange.
Dict NonStrictBaseStateDict(int rank);

}  // namespace distckpt::megatron

#endif  // DISTCKPT_SCENARIOS_MEGATRON_TESTUTIL_H_
