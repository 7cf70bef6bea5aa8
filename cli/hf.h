// The CLI's export and import commands (cli/export.cc, cli/hf_import.cc):
// flags parsed in main.cc, the work done by the library (reference/interop/).
#ifndef DISTCKPT_CLI_HF_H_
#define DISTCKPT_CLI_HF_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "interop/export_args.h"

namespace distckpt {

struct ImportArgs {
  std::string out, from = "hf", dir, spec, topology, format = "native";
  std::vector<std::string> drops;  // --drop GLOB: HF tensors left out on purpose
};

// --to hf, --to fsdp-dtensor, or --to native|dcp|dcp-1.13 (ConvertCheckpoint).
int ExportCommand(const ExportArgs& args);

// import --from hf: the HF model in `dir` saved under `topology` as the
// spec's Megatron GPT state (tensors only: no objects): WriteHfUnsharded,
// then every rank loads its request from it and saves (harness ReshardRank).
// Vocab padding rows, which HF does not store, load as zeros. The temporary
// checkpoint (`<out>.hf-import`) is removed afterwards, also on failure.
struct ImportSummary {
  size_t tensors = 0;
  uint64_t bytes_written = 0;
  std::vector<std::string> dropped;  // HF tensors no Megatron key maps from, left out by --drop
};
ImportSummary ImportFromHf(const ImportArgs& args);
// export --spec gpt: the GPT model section inferred from the checkpoint's
// metadata with args.sets applied (harness InferGptModel; refused naming the
// field it cannot decide, e.g. heads). Printed as "spec gpt inferred: {...}".
nlohmann::json InferExportModel(const ExportArgs& args);
int ImportCommand(const ImportArgs& args);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_HF_H_
