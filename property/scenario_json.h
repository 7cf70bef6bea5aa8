// Scenario -> scenario file JSON (schema version 1, scenarios/README.md): the
// inverse of Scenario::FromJson for the fields property generators set
// (tensors, objects, topologies, pairs, strict), so a counterexample is a file
// that `distckpt run` replays. Model generator sections are not written.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_PROPERTY_SCENARIO_JSON_H_
#define DISTCKPT_PROPERTY_SCENARIO_JSON_H_

#include <string>

#include <nlohmann/json.hpp>

#include "scenario/spec.h"

namespace distckpt {

nlohmann::json TensorSpecToJson(const TensorSpec& spec);
// `description` (optional) goes into the file's "description" field.
nlohmann::json ScenarioToJson(const Scenario& scenario, const std::string& description = "");

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_SCENARIO_JSON_H_
