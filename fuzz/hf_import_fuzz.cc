// libFuzzer target: an HF model directory as import --from hf reads it
// (interop/hf/import.h WriteHfUnsharded): model.safetensors.index.json's
// weight_map, config.json (num_experts_per_tok, model_type), and the
// safetensors shards it names, whose tensors are checked against the spec's
// model, read and cut into native chunks. The directory and the checkpoint
// written live in a MemoryEnv.
//
// Input: parts (fuzz_parts.h) index.json, config.json, the shard
// model-00001-of-00002.safetensors (also model.safetensors when index.json
// is empty), model-00002-of-00002.safetensors. The spec: a one-layer GPT
// (hidden 8, 2 heads, ffn 16, vocab 16, SwiGLU, untied); the architecture
// follows from the HF keys as import decides it (q/k/v biases make a
// Qwen2). Any input imports or throws CheckpointError
// (DISTCKPT_FUZZ_VERBOSE=1 prints which).
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz_parts.h"
#include "interop/hf/import.h"
#include "interop/hf/plan.h"
#include "io/memory_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const distckpt::GptExportSpec spec = distckpt::GptExportSpecFromJson({{"layers", 1},
                                                                               {"hidden", 8},
                                                                               {"heads", 2},
                                                                               {"query_groups", 2},
                                                                               {"ffn", 16},
                                                                               {"vocab", 16},
                                                                               {"glu", true},
                                                                               {"tied", false}},
                                                                              "fuzz spec");
  static const bool verbose = getenv("DISTCKPT_FUZZ_VERBOSE") != nullptr;
  const std::vector<std::string_view> parts = distckpt::FuzzParts(data, size, 4);
  distckpt::MemoryEnv env;
  env.CreateDirs("/hf");
  auto put = [&](const char* name, std::string_view bytes) {
    distckpt::WriteFileAtomic(&env, std::string("/hf/") + name, std::string(bytes));
  };
  if (!parts[0].empty()) put("model.safetensors.index.json", parts[0]);
  if (!parts[1].empty()) put("config.json", parts[1]);
  put(parts[0].empty() ? "model.safetensors" : "model-00001-of-00002.safetensors", parts[2]);
  if (!parts[3].empty()) put("model-00002-of-00002.safetensors", parts[3]);
  try {
    const std::vector<std::string> unused = distckpt::WriteHfUnsharded(&env, spec, "/hf", "/out");
    if (verbose) fprintf(stderr, "imported; %zu HF tensors unused\n", unused.size());
  } catch (const distckpt::CheckpointError& e) {
    if (verbose) fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
