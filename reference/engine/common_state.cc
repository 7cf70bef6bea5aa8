#include "engine/common_state.h"

#include <algorithm>

#include "core/error.h"

namespace distckpt {
namespace {

nlohmann::json ToJson(const Node& node, NodePath& path) {
  if (const Dict* d = node.get_if<Dict>()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, child] : *d) {
      path.push_back(key);
      out[key] = ToJson(child, path);
      path.pop_back();
    }
    return out;
  }
  if (const List* l = node.get_if<List>()) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < l->size(); ++i) {
      path.push_back(std::to_string(i));
      out.push_back(ToJson((*l)[i], path));
      path.pop_back();
    }
    return out;
  }
  if (const nlohmann::json* j = node.get_if<nlohmann::json>()) return *j;
  Fail(ErrorKind::kUnsupported,
       "common state at '{}' holds a tensor or sharded value; only plain values can be common "
       "state",
       PathToString(path));
}

}  // namespace

nlohmann::json CommonToJson(const Node& common) {
  NodePath path;
  return ToJson(common, path);
}

Node CommonFromJson(const nlohmann::json& json) {
  if (json.is_array() && std::any_of(json.begin(), json.end(),
                                     [](const nlohmann::json& e) { return e.is_object(); })) {
    List out;
    for (const nlohmann::json& e : json) out.push_back(CommonFromJson(e));
    return Node(std::move(out));
  }
  if (!json.is_object()) return Node(json);
  Dict out;
  for (auto it = json.begin(); it != json.end(); ++it) out[it.key()] = CommonFromJson(it.value());
  return Node(std::move(out));
}

}  // namespace distckpt
