// The smallest distckpt program: an 8x4 weight split by rows over TP, saved under
// tp=2, loaded under tp=4 (ranks are threads).  minimal DIR: exit 0 = every element right
#include <atomic>
#include <cstdio>

#include "distckpt.h"  // installed: <distckpt/distckpt.h>
using namespace distckpt;
// This rank's rows (tp_axis 0) of the weight; element (r, c) is 4r + c (or -1: to load).
Node State(const char* layout, int rank, bool fill) {
  const Topology t = Topology::Parse(layout);
  auto w = TensorParallelShard("weight", Tensor::Empty(DType::kF32, {8 / t.tp, 4}), t, rank, 0);
  for (int64_t i = 0; i < w.data.numel(); ++i)
    StoreFromDouble(w.data.data(), DType::kF32, i, fill ? w.GlobalBox().offset[0] * 4 + i : -1);
  return Node(Dict{{"weight", Node(w)}});
}
int main(int argc, char** argv) try {
  if (argc != 2) return 2;
  RunRanks(2, [&](Communicator& comm) { Save(State("tp=2", comm.rank(), true), argv[1], comm); });
  std::atomic<int> wrong{0};
  RunRanks(4, [&](Communicator& comm) {
    LoadResult got = Load(State("tp=4", comm.rank(), false), argv[1], comm);
    const Tensor& rows = got.state_dict.at("weight").as<Tensor>();
    for (int64_t i = 0; i < rows.numel(); ++i) wrong += rows.At(i) != comm.rank() * 8 + i;
  });
  std::printf("saved under tp=2, loaded under tp=4: %d wrong elements\n", wrong.load());
  return wrong == 0 ? 0 : 1;
} catch (const CheckpointError& e) {
  std::fprintf(stderr, "minimal: %s\n", e.what());
  return 2;
}
