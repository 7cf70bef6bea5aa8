// A program that uses the installed distckpt package (find_package(distckpt)):
// a small GPT-like state saved under one parallel layout and loaded under
// others, every element checked. Ranks are threads of this process
// (RunRanks); under MPI each rank would be a process (MpiWorld()).
//
//   consumer WORK_DIR    exit 0 = every element loaded right, 1 = a mismatch,
//                        2 = a CheckpointError
//
// 1. save under tp=2 (native format), check the metadata API's view of it;
// 2. load under tp=4, and under dp=2 with the fully parallel strategy;
// 3. save under tp=4 in PyTorch DCP format, load under tp=2,dp=2.
#include <distckpt/distckpt.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using distckpt::Communicator;
using distckpt::DType;
using distckpt::Node;
using distckpt::ShardedTensor;
using distckpt::Tensor;
using distckpt::Topology;

struct Param {
  std::string key;
  DType dtype;
  distckpt::Shape shape;
  int tp_axis;  // the axis tensor parallelism splits; -1 = replicated over tp
};

const std::vector<Param>& Model() {
  static const std::vector<Param> params = {
      {"embedding.word_embeddings.weight", DType::kF32, {16, 8}, 0},       // vocab parallel
      {"decoder.layers.mlp.linear_fc1.weight", DType::kBF16, {12, 8}, 0},  // column parallel
      {"decoder.layers.mlp.linear_fc2.weight", DType::kBF16, {8, 12}, 1},  // row parallel
      {"decoder.final_layernorm.weight", DType::kF32, {8}, -1},            // replicated
  };
  return params;
}

// Element `index` (row-major, global) of parameter `p`: small integers, exact in bf16.
double Value(size_t p, int64_t index) {
  return static_cast<double>((static_cast<int64_t>(p) * 37 + index) % 200 - 100);
}

// The global row-major index of element `i` of a shard's local chunk.
int64_t GlobalIndex(const ShardedTensor& shard, int64_t i) {
  const distckpt::Box box = shard.GlobalBox();
  int64_t global = 0, stride = 1;
  for (size_t axis = box.shape.size(); axis-- > 0;) {
    global += (box.offset[axis] + i % box.shape[axis]) * stride;
    i /= box.shape[axis];
    stride *= shard.global_shape[axis];
  }
  return global;
}

// This rank's shard of parameter `p` under `topology` (Megatron's replica
// ids): its values when `fill`, else a sentinel to be overwritten.
ShardedTensor Shard(size_t p, const Topology& topology, int rank, bool fill) {
  const Param& param = Model()[p];
  distckpt::Shape local = param.shape;
  if (param.tp_axis >= 0) local[param.tp_axis] /= topology.tp;
  ShardedTensor shard = distckpt::TensorParallelShard(
      param.key, Tensor::Empty(param.dtype, local), topology, rank,
      param.tp_axis >= 0 ? param.tp_axis : distckpt::kReplicatedOverTp);
  for (int64_t i = 0; i < shard.data.numel(); ++i) {
    double v = fill ? Value(p, GlobalIndex(shard, i)) : -1000;
    distckpt::StoreFromDouble(shard.data.data(), param.dtype, static_cast<size_t>(i), v);
  }
  return shard;
}

Node State(const Topology& topology, int rank, bool fill) {
  Node state;
  for (size_t p = 0; p < Model().size(); ++p) {
    state[Model()[p].key] = Node(Shard(p, topology, rank, fill));
  }
  if (fill) state["iteration"] = Node(nlohmann::json(1000));  // common state
  return state;
}

void SaveUnder(const std::string& layout, const std::string& dir, const char* format) {
  const Topology topology = Topology::Parse(layout);
  distckpt::RunRanks(topology.world_size(), [&](Communicator& comm) {
    distckpt::SaveOptions options;
    options.topology = layout;  // recorded in the metadata
    options.format = &distckpt::FormatByName(format);
    distckpt::Save(State(topology, comm.rank(), /*fill=*/true), dir, comm, options);
  });
  std::printf("saved %s under %s (%s)\n", dir.c_str(), layout.c_str(), format);
}

// Loads `dir` under `layout` and counts wrong elements.
int64_t LoadUnder(const std::string& layout, const std::string& dir, bool fully_parallel) {
  const Topology topology = Topology::Parse(layout);
  std::atomic<int64_t> checked{0}, wrong{0};
  distckpt::RunRanks(topology.world_size(), [&](Communicator& comm) {
    distckpt::LoadOptions options;
    options.strict = distckpt::StrictHandling::kRaiseAll;  // keys must match exactly
    if (fully_parallel) {  // each shard read once per parallel group (here: every rank)
      options.strategy = distckpt::LoadStrategy::FullyParallel();
    }
    const Node request = State(topology, comm.rank(), /*fill=*/false);
    distckpt::LoadResult loaded = distckpt::Load(request, dir, comm, options);
    for (size_t p = 0; p < Model().size(); ++p) {
      const ShardedTensor& want = request.at(Model()[p].key).as<ShardedTensor>();
      const Tensor& got = loaded.state_dict.at(Model()[p].key).as<Tensor>();
      if (got.numel() != want.data.numel()) ++wrong;
      for (int64_t i = 0; i < got.numel() && i < want.data.numel(); ++i) {
        ++checked;
        double expected = Value(p, GlobalIndex(want, i));
        if (got.At(i) != expected && wrong++ == 0) {
          std::fprintf(stderr, "rank %d: %s element %lld is %g, expected %g\n", comm.rank(),
                       want.key.c_str(), static_cast<long long>(GlobalIndex(want, i)), got.At(i),
                       expected);
        }
      }
    }
    if (loaded.state_dict.at("iteration").as<nlohmann::json>() != 1000) ++wrong;
  });
  std::printf("loaded %s under %s%s: %lld elements checked, %lld wrong\n", dir.c_str(),
              layout.c_str(), fully_parallel ? " (fully parallel)" : "",
              static_cast<long long>(checked.load()), static_cast<long long>(wrong.load()));
  return checked.load() == 0 ? 1 : wrong.load();
}

// The metadata API: what the checkpoint holds, without a sharded request.
int64_t CheckMetadata(const std::string& dir) {
  int64_t wrong = 0;
  const Node tensors = distckpt::LoadTensorsMetadata(dir);
  for (const Param& param : Model()) {
    const ShardedTensor& stored = tensors.at(param.key).as<ShardedTensor>();
    if (stored.global_shape != param.shape || stored.dtype != param.dtype) ++wrong;
  }
  if (tensors.as<distckpt::Dict>().size() != Model().size()) ++wrong;
  std::printf("metadata of %s: %zu tensors, %lld wrong\n", dir.c_str(),
              tensors.as<distckpt::Dict>().size(), static_cast<long long>(wrong));
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s WORK_DIR\n", argv[0]);
    return 2;
  }
  const std::string work = argv[1];
  try {
    const std::string native = work + "/native", dcp = work + "/dcp";
    std::filesystem::remove_all(native);
    std::filesystem::remove_all(dcp);
    int64_t wrong = 0;
    SaveUnder("tp=2", native, "native");
    wrong += CheckMetadata(native);
    wrong += LoadUnder("tp=4", native, /*fully_parallel=*/false);
    wrong += LoadUnder("dp=2", native, /*fully_parallel=*/true);
    SaveUnder("tp=4", dcp, "dcp");
    wrong += LoadUnder("tp=2,dp=2", dcp, /*fully_parallel=*/false);
    std::printf("%s\n", wrong == 0 ? "OK" : "FAILED");
    return wrong == 0 ? 0 : 1;
  } catch (const distckpt::CheckpointError& e) {
    std::fprintf(stderr, "error (%s): %s\n", std::string(distckpt::ErrorKindName(e.kind())).c_str(),
                 e.what());
    return 2;
  }
}
