// libFuzzer target: a verl FSDP1 actor directory as ReadVerlRank reads it
// (format/verl/verl_files.h, fsdp1_flat.h): fsdp_config.json checked against
// the model files' world size (VerlWorldSize), then rank 0's optimizer file,
// FSDP1 flat parameters whose per-rank shard sizes the reader infers the
// FSDP units from (InferFsdp1Units), cut back into each parameter's piece.
//
// Input: parts (fuzz_parts.h) fsdp_config.json and the optimizer file's
// data.pkl. The data.pkl is archived with the storages of the committed
// fixture's optimizer file (fixtures/verl-runs/fsdp1-w3, rank 0 of 3), so
// the records' CRCs hold and mutations reach the unpickling, the shard
// sizes and the unit inference; the model file is the fixture's. Files live
// in a MemoryEnv. Any input reads or throws CheckpointError
// (DISTCKPT_FUZZ_VERBOSE=1 prints which).
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "format/dcp/torch_zip.h"
#include "format/verl/verl_files.h"
#include "fuzz_parts.h"
#include "io/memory_env.h"

namespace {

constexpr int kWorld = 3, kRank = 0;

struct Fixture {
  std::string model;                                         // the model file
  std::vector<std::pair<std::string, std::string>> records;  // the optimizer's but data.pkl
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fprintf(stderr, "verl_fsdp1_fuzz: cannot read %s\n", path.c_str());
    abort();
  }
  return {std::istreambuf_iterator<char>(in), {}};
}

const Fixture& GetFixture() {
  static const Fixture fixture = [] {
    Fixture f;
    const std::string dir = std::string(DISTCKPT_VERL_RUNS) + "/fsdp1-w3/global_step_1/actor/";
    f.model = ReadFile(dir + distckpt::VerlModelFile(kWorld, kRank));
    const std::string name = distckpt::VerlOptimFile(kWorld, kRank);
    const std::string optim = ReadFile(dir + name);
    distckpt::ZipReader zip(optim, name);
    for (const distckpt::ZipReader::Entry& e : zip.entries()) {
      if (e.name != "data.pkl") f.records.emplace_back(e.name, zip.ReadRecord(e));
    }
    return f;
  }();
  return fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = getenv("DISTCKPT_FUZZ_VERBOSE") != nullptr;
  const Fixture& f = GetFixture();
  const std::vector<std::string_view> parts = distckpt::FuzzParts(data, size, 2);
  distckpt::MemoryEnv env;
  env.CreateDirs("/actor");
  if (!parts[0].empty())
    distckpt::WriteFileAtomic(&env, "/actor/fsdp_config.json", std::string(parts[0]));
  distckpt::WriteFileAtomic(&env, "/actor/" + distckpt::VerlModelFile(kWorld, kRank), f.model);
  distckpt::WriteFileAtomic(&env, "/actor/" + distckpt::VerlOptimFile(kWorld, kRank),
                            distckpt::ZipToString([&](distckpt::ZipWriter& zip) {
                              zip.AddRecord("data.pkl", parts[1]);
                              for (const auto& [name, bytes] : f.records)
                                zip.AddRecord(name, bytes);
                            }));
  try {
    const int world = distckpt::VerlWorldSize("/actor", &env);
    const distckpt::VerlRankState state = distckpt::ReadVerlRank("/actor", world, kRank, &env);
    if (verbose) fprintf(stderr, "read: %zu tensors\n", state.tensors.size());
  } catch (const distckpt::CheckpointError& e) {
    if (verbose) fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
