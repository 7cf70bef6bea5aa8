#include "property/scenario_json.h"

namespace distckpt {
namespace {

using nlohmann::json;

json DimsToJson(const std::vector<MeshDim>& dims) {
  if (dims.size() == 1) return std::string(MeshDimName(dims[0]));
  json out = json::array();
  for (MeshDim d : dims) out.push_back(std::string(MeshDimName(d)));
  return out;
}

json PairToJson(const PairSpec& pair) {
  json j = {{"save", pair.save}, {"load", pair.load}};
  if (pair.strict) j["strict"] = std::string(StrictHandlingName(*pair.strict));
  if (pair.expect_error) j["expect"] = {{"error", *pair.expect_error}};
  if (!pair.load_extra.empty()) {
    j["load_extra"] = json::array();
    for (const TensorSpec& t : pair.load_extra) j["load_extra"].push_back(TensorSpecToJson(t));
  }
  if (!pair.load_drop.empty()) j["load_drop"] = pair.load_drop;
  if (pair.break_save) {
    j["break"] = {{"key", pair.break_save->key}, {"kind", pair.break_save->kind},
                  {"rank", pair.break_save->rank}};
  }
  if (pair.expect_missing) j["expect_missing"] = *pair.expect_missing;
  if (pair.expect_unexpected) j["expect_unexpected"] = *pair.expect_unexpected;
  return j;
}

}  // namespace

json TensorSpecToJson(const TensorSpec& spec) {
  json j = {{"key", spec.key}, {"shape", spec.shape}, {"dtype", std::string(DTypeName(spec.dtype))}};
  if (!spec.shard.empty()) {
    j["shard"] = json::object();
    for (const auto& [axis, dims] : spec.shard) j["shard"][std::to_string(axis)] = DimsToJson(dims);
  }
  if (spec.split == SplitKind::kChunk) j["split"] = "chunk";
  if (spec.flatten) j["flatten"] = std::string(MeshDimName(*spec.flatten));
  if (spec.flatten_jitter) j["flatten_jitter"] = true;
  if (spec.pad_multiple > 0) j["pad_multiple"] = spec.pad_multiple;
  if (spec.load_dtype) j["load_dtype"] = std::string(DTypeName(*spec.load_dtype));
  return j;
}

json ScenarioToJson(const Scenario& s, const std::string& description) {
  json j = {{"name", s.name}, {"seed", s.seed}};
  if (!description.empty()) j["description"] = description;
  j["tensors"] = json::array();
  for (const TensorSpec& t : s.tensors) j["tensors"].push_back(TensorSpecToJson(t));
  if (!s.objects.empty()) {
    j["objects"] = json::array();
    for (const ObjectSpec& o : s.objects) {
      json oj = {{"key", o.key}};
      if (!o.per.empty()) oj["per"] = DimsToJson(o.per);
      j["objects"].push_back(oj);
    }
  }
  if (!s.topologies.empty()) j["topologies"] = s.topologies;
  if (!s.pairs.empty()) {
    j["pairs"] = json::array();
    for (const PairSpec& p : s.pairs) j["pairs"].push_back(PairToJson(p));
  }
  if (s.strict != StrictHandling::kAssumeOkUnexpected) {
    j["strict"] = std::string(StrictHandlingName(s.strict));
  }
  return j;
}

}  // namespace distckpt
