// Ports of Megatron-Core's test_fp8.py::test_fp8_save_load (v0.15.3;
// docs/megatron-semantics.md §6 and §9.2 row 10) on the engine, with FP8 per-tensor
// scaling from reference/fp8/: the `dequantized` storage Megatron uses (FP8
// values stored in their nominal bf16 and requests dequantised before the
// load), quantising a loaded bf16 tensor into an FP8 request with the
// request's scale, and the `raw` storage (FP8 codes + a scale_inv companion
// entry), bit-exact over all 256 codes under another sharding.
#include <gtest/gtest.h>

#include <cstring>

#include "comm/thread_world.h"
#include "engine/load.h"
#include "engine/save.h"
#include "fp8/quantize.h"
#include "megatron_testutil.h"

namespace distckpt::megatron {
namespace {

// Megatron's state dict: 'a' (3 per rank) sharded over all ranks along axis
// 0, 'b' and 'c' replicated with replica_id = rank; every value the bf16
// dequantisation of FP8(value) with scale `scale`.
Node Fp8StateDict(int rank, double value, float scale) {
  auto fp8 = [&](Shape shape) {
    Tensor codes = QuantizeFp8(Full(DType::kBF16, shape, value), DType::kF8E4M3FN, scale).codes;
    return DequantizeFp8(codes, 1.0f / scale, DType::kBF16);
  };
  Dict sd;
  sd["a"] = Node(ShardedTensor::FromRankOffsets("a", fp8({3}), {{0, rank, kWorldSize}}));
  sd["b"] = Node(ShardedTensor::FromRankOffsets("b", fp8({3}), {}, {rank}));
  sd["c"] = Node(ShardedTensor::FromRankOffsets("c", fp8({3}), {}, {rank}));
  return Node(std::move(sd));
}

TEST(MegatronFp8Test, DequantizedSaveLoadIntoDequantisedAndFp8Requests) {
  ScratchDir scratch("fp8");
  const std::string dir = scratch.Sub("ckpt");
  RunRanks(kWorldSize,
           [&](Communicator& comm) { Save(Fp8StateDict(comm.rank(), 4, 1.0f), dir, comm); });
  RunRanks(kWorldSize, [&](Communicator& comm) {
    // FP8 requests filled with 8, dequantised before the load as Megatron does.
    LoadResult loaded = Load(Fp8StateDict(comm.rank(), 8, 1.0f), dir, comm);
    for (const char* key : {"a", "b", "c"}) {
      Tensor t = TensorAt(loaded.state_dict, key);
      for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.At(i), 4.0) << key;
    }
    // Quantising the loaded bf16 into an FP8 request with the request's scale:
    // 4 x 64 = 256 fits e4m3fn, 4 x 256 = 1024 saturates every element.
    Tensor a = TensorAt(loaded.state_dict, "a");
    Fp8Quantized fits = QuantizeFp8(a, DType::kF8E4M3FN, 64.0f);
    EXPECT_EQ(fits.saturated, 0);
    EXPECT_EQ(DequantizeFp8(fits.codes, 1.0f / 64, DType::kF32).At(0), 4.0);
    EXPECT_EQ(QuantizeFp8(a, DType::kF8E4M3FN, 256.0f).saturated, a.numel());
  });
}

// Raw storage: the codes of `fp8` 0..255 in 8 shards of 32 plus scale_inv.
Node RawStateDict(DType fp8, int part, int parts, int replica, bool fill) {
  const int64_t n = 256 / parts;
  Tensor codes = Tensor::Zeros(fp8, {n});
  for (int64_t i = 0; fill && i < n; ++i)
    codes.data_as<uint8_t>()[i] = static_cast<uint8_t>(part * n + i);
  Dict sd;
  sd["w"] = Node(ShardedTensor::FromRankOffsets("w", codes, {{0, part, parts}}, {replica}));
  sd["s"] = Node(ShardedTensor::FromRankOffsets(
      ScaleInvKey("w"), Full(DType::kF32, {1}, fill ? 0.125 : 0), {}, {part + replica}));
  return Node(std::move(sd));
}

TEST(MegatronFp8Test, RawStorageRoundTripsAllCodesBitExactUnderAnotherSharding) {
  for (DType fp8 : {DType::kF8E4M3FN, DType::kF8E5M2}) {
    ScratchDir scratch("fp8raw");
    const std::string dir = scratch.Sub("ckpt");
    RunRanks(kWorldSize, [&](Communicator& comm) {
      Save(RawStateDict(fp8, comm.rank(), kWorldSize, 0, true), dir, comm);
    });
    RunRanks(kWorldSize, [&](Communicator& comm) {
      int part = comm.rank() % 4, replica = comm.rank() / 4;  // 4 shards of 64, twice
      LoadResult loaded = Load(RawStateDict(fp8, part, 4, replica, false), dir, comm);
      Tensor w = TensorAt(loaded.state_dict, "w");
      EXPECT_EQ(w.dtype(), fp8);
      for (int64_t i = 0; i < w.numel(); ++i) {
        EXPECT_EQ(w.data_as<uint8_t>()[i], part * 64 + i) << DTypeName(fp8);
      }
      float scale_inv = static_cast<float>(TensorAt(loaded.state_dict, "s").At(0));
      EXPECT_EQ(scale_inv, 0.125f);
      Tensor f32 = DequantizeFp8(w, scale_inv, DType::kF32);
      float first = fp8 == DType::kF8E4M3FN ? E4M3FNToFloat(static_cast<uint8_t>(part * 64 + 1))
                                            : E5M2ToFloat(static_cast<uint8_t>(part * 64 + 1));
      EXPECT_EQ(f32.data_as<float>()[1], first * 0.125f);
    });
  }
}

}  // namespace
}  // namespace distckpt::megatron
