// import --from hf, step 1: the tensors of a Hugging Face model directory
// (model.safetensors.index.json's weight_map, or one model.safetensors) cut
// into the pieces of the Megatron tensors the export plan maps them from
// (PlanHfExport run backwards: q/k/v rows back into linear_qkv's interleaved
// groups, gate/up into SwiGLU fc1, model.layers.{i} into the stacked layer
// axis) and written as chunks of one unsharded native checkpoint in `tmp`.
// Step 2 (the CLI's import) loads it under a topology and saves.
//
// Returns the HF tensor names no Megatron tensor maps from.
// Errors: CheckpointError naming the HF file and tensor (missing files,
// shapes the spec does not give, mixed dtypes within one Megatron tensor).
// Memory: one HF tensor at a time. Thread-safety: one call per `tmp`.
#ifndef DISTCKPT_INTEROP_HF_IMPORT_H_
#define DISTCKPT_INTEROP_HF_IMPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "interop/hf/plan.h"
#include "io/env.h"

namespace distckpt {

// `megatron`: the Megatron tensors (key, global shape with the vocab
// unpadded) the spec's model stores; empty: a Llama-style model's, with
// biases where the HF model has them.
std::vector<std::string> WriteHfUnsharded(
    Env* env, const GptExportSpec& spec, const std::string& dir, const std::string& tmp,
    const std::vector<std::pair<std::string, Shape>>& megatron = {});

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_HF_IMPORT_H_
