// distckpt import --from hf: the library's WriteHfUnsharded
// (interop/hf/import.h), then every rank of the topology loads its request
// of the spec from the unsharded checkpoint and saves under the topology
// (harness ReshardRank). Vocab padding rows, which HF does not store, load
// as zeros. The temporary checkpoint (`<out>.hf-import`) is removed
// afterwards, also on failure.
#include "interop/hf/import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "core/json_parse.h"  // internal: the bounded JSON reader of user files
#include "format/format.h"
#include "harness/expand/gpt_model.h"
#include "harness/expand/param.h"
#include "harness/spec/spec.h"
#include "harness/tools/request_spec.h"
#include "harness/tools/verify.h"
#include "interop/hf/accounting.h"
#include "interop/hf/plan.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

struct ImportArgs {
  std::string out, from = "hf", dir, spec, topology, format = "native";
  std::vector<std::string> drops;  // --drop GLOB: HF tensors left out on purpose
};

struct ImportSummary {
  size_t tensors = 0;
  uint64_t bytes_written = 0;
  std::vector<std::string> dropped;  // HF tensors no Megatron key maps from, left out by --drop
};

ImportSummary ImportFromHf(const ImportArgs& args) {
  Env* env = Env::Default();
  if (args.from != "hf") Fail(ErrorKind::kUnsupported, "import --from {}: only hf", args.from);
  const GptExportSpec spec = GptExportSpecFromFile(args.spec);
  const Topology topo = Topology::Parse(args.topology);
  const Format& format = FormatByName(args.format);
  const std::string tmp = args.out + ".hf-import";
  auto cleanup = [&] {
    env->RemoveAll(tmp);
    env->RemoveAll(tmp + ".lock");
  };
  cleanup();  // a previous import's leftover (ours by name)
  ImportSummary summary;
  try {
    // The Megatron keys and shapes of the spec's model, as the generator lays
    // them out (fused layer-norm names, biases, position table, experts).
    std::vector<std::pair<std::string, Shape>> megatron;
    {
      nlohmann::json model = ReadScenarioJson(args.spec);
      if (model.contains("model"))
        model = model["model"].is_array() ? model["model"][0] : model["model"];
      const GptConfig config = ParseGptConfig(model, args.spec);
      for (const Param& p : ExpandGptParams(config, Topology::Parse("tp=1"), 0)) {
        Shape shape = p.pieces.front().global_shape;
        if (p.logical_shape.size() == shape.size()) shape = p.logical_shape;
        megatron.emplace_back(p.key(), shape);
      }
    }
    // Exact or refused, as export: an HF tensor the model has no place for is
    // an error naming each (the spec is not the model that was exported), or
    // left out on purpose with --drop GLOB.
    std::vector<std::string> unplaced;
    for (std::string& name : WriteHfUnsharded(env, spec, args.dir, tmp, megatron)) {
      const bool drop = std::any_of(args.drops.begin(), args.drops.end(),
                                    [&](const std::string& g) { return GlobMatch(g, name); });
      (drop ? summary.dropped : unplaced).push_back(std::move(name));
    }
    if (!unplaced.empty()) {
      Fail(ErrorKind::kKeyMismatch,
           "{}: {} HF tensor(s) have no place in the spec's Megatron model (nothing is written; "
           "--drop GLOB leaves a tensor out on purpose): {}",
           args.dir, unplaced.size(), fmt::join(unplaced, ", "));
    }
    std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(env, tmp);
    Scenario request = LoadRequestSpec(args.spec, reader->metadata(), {});
    summary.tensors = reader->metadata().tensors.size();
    reader.reset();
    std::vector<ReshardResult> results(topo.world_size());
    RunRanks(topo.world_size(), [&](Communicator& comm) {
      results[comm.rank()] = ReshardRank(request, tmp, args.topology, args.out, format,
                                         request.strict, comm, /*objects=*/false);
    });
    summary.bytes_written = results[0].bytes_written;
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return summary;
}

int ImportCommand(const ImportArgs& args) {
  ImportSummary s = ImportFromHf(args);
  for (const std::string& name : s.dropped) {
    std::cout << fmt::format("dropped (--drop): HF tensor '{}'\n", name);
  }
  std::cout << fmt::format(
      "imported {} Megatron tensors from HF model {} into {} under {} ({} format): {} bytes "
      "written\n",
      s.tensors, args.dir, args.out, args.topology, args.format, s.bytes_written);
  return kExitOk;
}

}  // namespace

Command AddImportCommand(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* imp = app.add_subcommand(
      "import", "a Hugging Face model (safetensors shards) into a checkpoint under a topology");
  imp->add_option("out", args->out, "output checkpoint directory")->required();
  imp->add_option("--from", args->from, "hf")->check(CLI::IsMember({"hf"}));
  imp->add_option("dir", args->dir, "HF model directory")->required();
  imp->add_option("--spec", args->spec,
                  "the GPT model: a JSON spec or scenario file (as export's --spec)")
      ->required();
  imp->add_option("--topology", args->topology, "topology to save under")->required();
  imp->add_option("--drop", args->drops,
                  "leave HF tensors matching GLOB out on purpose (repeatable); any other HF "
                  "tensor the model has no place for refuses the import");
  imp->add_option("--format", args->format, "native (default), dcp or dcp-1.13")
      ->check(CLI::IsMember({"native", "dcp", "dcp-1.13"}));
  return {imp, [args](CommandLine&) { return ImportCommand(*args); }};
}

}  // namespace distckpt
