// Reading and writing a scenario's "fp8" section (scenarios/README.md): the
// storage mode and the FP8 tensor entries (spec/fp8_spec.h); what the section
// saves and loads is expanded by harness/expand/fp8_section.h.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_SCENARIO_FP8_PARSE_H_
#define DISTCKPT_SCENARIO_FP8_PARSE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/spec/spec.h"

namespace distckpt {

// Parses `{"storage": ..., "tensors": [...]}`; throws
// CheckpointError(kInvalidArgument) naming the JSON path of a bad field.
std::vector<Fp8TensorSpec> ParseFp8Section(const nlohmann::json& json, const std::string& path);
// The section as ParseFp8Section reads it (every entry with its storage).
nlohmann::json Fp8SectionToJson(const std::vector<Fp8TensorSpec>& section);
// Refuses fp8 keys (or their scale_inv companions) that are also tensor keys.
void CheckFp8Keys(const Scenario& scenario);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_FP8_PARSE_H_
