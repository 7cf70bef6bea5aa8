// Request specs: what each rank of a topology requests from an existing
// checkpoint (`distckpt verify` / `reshard`). Any scenario file is a spec
// (its tensors, model, objects; values are irrelevant); in a spec,
// `tensors[].shape` may be omitted and is then taken from the checkpoint's
// metadata. The spec "gpt" infers one GPT model generator from the
// checkpoint's keys and shapes (InferGptModel).
//
// Errors: CheckpointError(kInvalidArgument) naming the spec path, field or
// key.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_REQUEST_SPEC_H_
#define DISTCKPT_SCENARIO_REQUEST_SPEC_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "format/checkpoint_metadata.h"
#include "harness/spec/spec.h"

namespace distckpt {

// `--set field=value` overrides: value parsed as JSON when it is JSON
// (numbers, true/false, lists), else taken as a string.
using SpecOverrides = std::map<std::string, nlohmann::json>;
SpecOverrides ParseSpecOverrides(const std::vector<std::string>& assignments);

// The GPT generator's model section for the single GPT model `metadata`
// holds: layers, hidden, ffn, vocab (the stored, padded rows), glu, experts,
// moe_layer_freq, tied, dtype and prefix from keys and shapes; `overrides`
// win over (and supply) any field. Fields the shapes cannot decide (heads:
// linear_qkv is [3*hidden, hidden] for any head count) must come from
// `overrides`; otherwise the inference is refused naming the field.
nlohmann::json InferGptModel(const CheckpointMetadata& metadata, const SpecOverrides& overrides);

// The optimizer section (scenarios/README.md, Optimizer) of the Adam state
// `metadata` holds: its format from Megatron's param_state_sharding_type in
// the common state, else from the keys (optimizer.distributed.* bucket
// space: dp_reshardable; optimizer.state.param.*: fully_reshardable;
// flattened ranges: fully_sharded_model_space; else plain); nullopt when the
// checkpoint holds no optimizer state.
std::optional<nlohmann::json> InferOptimizer(const CheckpointMetadata& metadata);

// A spec file's JSON with every omitted `tensors[].shape` filled from
// `metadata` (the stored global shape without the spec's stack axes), parsed.
Scenario SpecFromJson(nlohmann::json spec, const std::string& source,
                      const CheckpointMetadata& metadata);

// "gpt" (InferGptModel), or a spec file. `overrides` apply to "gpt" only.
Scenario LoadRequestSpec(const std::string& spec, const CheckpointMetadata& metadata,
                         const SpecOverrides& overrides);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_REQUEST_SPEC_H_
