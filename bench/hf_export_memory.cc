// Peak heap of `distckpt export --to hf` (interop/hf/export.h): saves a Llama-shaped GPT
// (GQA, SwiGLU, stacked layers) under tp=2,pp=2 with the scenario harness,
// resets the heap high-water mark (bench/heap_counter.h), exports it to
// safetensors shards and prints the peak above the live bytes before the
// call next to the largest exported tensor. Exit 1 when the peak exceeds
// one largest tensor plus 1 MiB (metadata, JSON, file buffers).
//
//   build/bench/hf_export_memory [WORK_DIR]
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "comm/thread_world.h"
#include "harness/run/runner.h"
#include "heap_counter.h"
#include "interop/hf/export.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace distckpt;
  fs::path work = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "distckpt-hf-bench";
  fs::remove_all(work);
  fs::create_directories(work);
  const nlohmann::json model = {{"kind", "gpt"}, {"layers", 8},          {"hidden", 512},
                                {"ffn", 1408},   {"heads", 8},           {"query_groups", 2},
                                {"vocab", 8000}, {"vocab_multiple", 64}, {"glu", true},
                                {"tied", false}, {"dtype", "bf16"},      {"linear_bias", false}};
  const std::string spec = (work / "spec.json").string();
  std::ofstream(spec) << nlohmann::json{{"model", model}}.dump();
  Scenario s = Scenario::FromJson(
      {{"name", "hf-bench"}, {"seed", 3}, {"model", model}, {"topologies", {"tp=2,pp=2"}}},
      "hf-bench");
  const std::string ck = (work / "ck").string();
  RunRanks(4, [&](Communicator& comm) {
    StepReport r = SaveStep(s, nullptr, "tp=2,pp=2", ck, comm);
    if (!r.ok) throw std::runtime_error(r.error);
  });
  ExportArgs args;
  args.checkpoint = ck;
  args.out = (work / "hf").string();
  args.spec = spec;
  args.max_shard_size = "20MB";
  const int64_t before = bench::HeapLiveBytes();
  bench::ResetHeapPeak();
  ExportSummary summary = ExportToHf(args);
  const int64_t peak = bench::HeapPeakBytes() - before;
  const int64_t bound = static_cast<int64_t>(summary.largest_tensor_bytes) + (1 << 20);
  std::cout << fmt::format(
      "hf export: {} tensors, {} bytes in {} files; largest tensor {} bytes; peak heap above "
      "the start {} bytes ({:.3f} x largest tensor; bound {})\n",
      summary.tensors, summary.total_bytes, summary.files, summary.largest_tensor_bytes, peak,
      double(peak) / double(summary.largest_tensor_bytes), bound);
  fs::remove_all(work);
  return peak <= bound ? 0 : 1;
}
