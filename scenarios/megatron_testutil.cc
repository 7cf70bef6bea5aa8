#include "megatron_testutil.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "comm/thread_world.h"
#include "mapping/testing.h"

namespace distckpt::megatron {

namespace fs = std::filesystem;

Topology ModelParallel(int tp, int pp, std::string_view order) {
  std::string text = fmt::format("tp={},pp={},dp={}", tp, pp, kWorldSize / (tp * pp));
  if (!order.empty()) text += fmt::format(",order={}", order);
  Topology topology = Topology::Parse(text);
  EXPECT_EQ(topology.world_size(), kWorldSize) << text;
  return topology;
}

ScratchDir::ScratchDir(std::string_view name) {
  std::string tmpl =
      (fs::path(::testing::TempDir()) / fmt::format("megatron_{}_XXXXXX", name)).string();
  if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "cannot create " << tmpl;
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::string ScratchDir::Sub(std::string_view name) const {
  return (fs::path(path_) / name).string();
}

std::vector<std::optional<CheckpointError>> ErrorsOnRanks(
    const std::function<void(Communicator&)>& fn) {
  std::vector<std::optional<CheckpointError>> errors(kWorldSize);
  RunRanks(kWorldSize, [&](Communicator& comm) {
    try {
      fn(comm);
    } catch (const CheckpointError& e) {
      errors[comm.rank()] = e;
    }
  });
  return errors;
}

std::string ExpectErrorOnEveryRank(const std::vector<std::optional<CheckpointError>>& errors,
                                   ErrorKind kind, const std::vector<std::string>& present,
                                   const std::vector<std::string>& absent) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank]) {
      ADD_FAILURE() << "rank " << rank << " threw no CheckpointError";
      continue;
    }
    const std::string message = errors[rank]->what();
    EXPECT_EQ(errors[rank]->kind(), kind) << "rank " << rank << ": " << message;
    for (const std::string& s : present) {
      EXPECT_NE(message.find(s), std::string::npos)
          << "rank " << rank << ": '" << s << "' not in: " << message;
    }
    for (const std::string& s : absent) {
      EXPECT_EQ(message.find(s), std::string::npos)
          << "rank " << rank << ": '" << s << "' unexpectedly in: " << message;
    }
  }
  return errors.empty() || !errors[0] ? "" : errors[0]->what();
}

Tensor Full(DType dtype, Shape shape, double value) {
  Tensor t = Tensor::Empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) StoreFromDouble(t.data(), dtype, i, value);
  return t;
}

std::set<std::string> KeysOf(const Node& node) {
  std::set<std::string> keys;
  if (const Dict* d = node.get_if<Dict>()) {
    for (const auto& [key, child] : *d) keys.insert(key);
  }
  return keys;
}

namespace {

const Node* ChildAt(const Node& state_dict, const std::string& key) {
  const Dict* d = state_dict.get_if<Dict>();
  if (d == nullptr) return nullptr;
  auto it = d->find(key);
  return it == d->end() ? nullptr : &it->second;
}

}  // namespace

Tensor TensorAt(const Node& state_dict, const std::string& key) {
  const Node* child = ChildAt(state_dict, key);
  if (child == nullptr || !child->is<Tensor>()) {
    ADD_FAILURE() << "no Tensor at '" << key << "' in " << NodeToString(state_dict);
    return Tensor();
  }
  return child->as<Tensor>();
}

std::vector<double> ValuesAt(const Node& state_dict, const std::string& key) {
  Tensor t = TensorAt(state_dict, key);
  return t.defined() ? Values(t) : std::vector<double>{};
}

nlohmann::json JsonAt(const Node& state_dict, const std::string& key) {
  const Node* child = ChildAt(state_dict, key);
  if (child == nullptr || !child->is<nlohmann::json>()) {
    ADD_FAILURE() << "no JSON value at '" << key << "' in " << NodeToString(state_dict);
    return nullptr;
  }
  return child->as<nlohmann::json>();
}

Dict NonStrictBaseStateDict(int rank) {
  const int64_t r = rank;
  Dict sd;
  sd["TenA"] = ShardedTensor::FromRankOffsets("TenA", Arange({2}), {}, {r});
  sd["TenB"] = ShardedTensor::FromRankOffsets("TenB", Arange({3}), {{0, r, kWorldSize}}, {0});
  sd["TenC"] = ShardedTensor::FromRankOffsets("TenC", Arange({3}), {}, {kWorldSize - r - 1});
  sd["ObjA"] =
      ShardedObject{"ObjA", nlohmann::json::array({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), {1}, {0}, {r}};
  sd["ObjB"] = ShardedObject{"ObjB", nlohmann::json::array({r + 7}), {1, kWorldSize}, {0, r}, {0}};
  return sd;
}

}  // namespace distckpt::megatron
