// export --to hf: a checkpoint (any topology, any format) as a Hugging Face
// model directory: model-NNNNN-of-NNNNN.safetensors shards (a new one when
// the next tensor would pass args.max_shard_size), their
// model.safetensors.index.json, and config.json. The model comes from
// args.spec (a spec file, or "names": stored keys are HF names) or
// args.model (the model section --spec gpt inferred); interop/hf/plan.h
// names the tensors.
//
// `out` must be new or empty; a failed export removes what it wrote.
// Memory: one HF tensor's buffer at a time.
// Thread-safety: one call at a time per `out`.
#ifndef DISTCKPT_INTEROP_HF_EXPORT_H_
#define DISTCKPT_INTEROP_HF_EXPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "interop/export_args.h"
#include "interop/hf/accounting.h"

namespace distckpt {

struct ExportSummary {
  size_t tensors = 0, files = 0;
  uint64_t total_bytes = 0, largest_tensor_bytes = 0;
  std::string architecture;    // config.json's class ("" for --spec names)
  ExportAccount account;       // where each stored model byte went
  size_t objects_skipped = 0;  // rng_state, _extra_state, common state...: not weights
};
ExportSummary ExportToHf(const ExportArgs& args);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_HF_EXPORT_H_
