// The options of `distckpt export` (--to hf, --to fsdp-dtensor) as the
// library takes them (interop/hf/export.h, interop/fsdp_dtensor_export.h).
//
// Thread-safety: plain data.
#ifndef DISTCKPT_INTEROP_EXPORT_ARGS_H_
#define DISTCKPT_INTEROP_EXPORT_ARGS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace distckpt {

struct ExportArgs {
  std::string checkpoint, to = "hf", out, spec, max_shard_size = "5GB", dtype;
  std::string config;              // --spec names: a config.json to copy
  std::string topology;            // --to fsdp-dtensor: the ranks' layout, dp=N[,tp=T]
  std::vector<std::string> sets;   // --set field=value, with --spec gpt
  std::vector<std::string> drops;  // --drop GLOB: stored model tensors left out on purpose
  nlohmann::json model;            // the model section --spec gpt inferred (null: read `spec`)
};

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_EXPORT_ARGS_H_
