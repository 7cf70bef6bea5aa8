// The state-dict tree: dict access, paths, factory build and message text.
#include "mapping/state_dict.h"

#include <fmt/format.h>

#include "core/error.h"
#include "mapping/py_format.h"

namespace distckpt {

Node ShardedTensorFactory::Build() const {
  if (!build_fn)
    Fail(ErrorKind::kInvalidArgument, "ShardedTensorFactory {} has no build_fn", PyRepr(key));
  return build_fn(key, data, replica_id, flattened_range);
}

Node& Node::operator[](const std::string& key) {
  if (!is<Dict>()) {
    const bool empty = (is<List>() && as<List>().empty()) ||
                       (is<nlohmann::json>() && as<nlohmann::json>().is_null());
    if (!empty) {
      Fail(ErrorKind::kInvalidArgument, "Cannot index a {} with key {}: not a dict",
           NodeTypeRepr(*this), PyRepr(key));
    }
    value_ = Dict{};
  }
  return as<Dict>()[key];
}

const Node& Node::at(const std::string& key) const {
  const Dict* dict = get_if<Dict>();
  if (dict == nullptr) {
    Fail(ErrorKind::kKeyMismatch, "Cannot look up key {} in a {}: not a dict", PyRepr(key),
         NodeTypeRepr(*this));
  }
  const auto it = dict->find(key);
  if (it == dict->end())
    Fail(ErrorKind::kKeyMismatch, "Key {} not found in state dict", PyRepr(key));
  return it->second;
}

std::string PathToString(const NodePath& path) { return fmt::format("{}", fmt::join(path, ".")); }

std::string NodeToString(const Node& node) {
  struct Visitor {
    std::string operator()(const Dict& d) const {
      std::vector<std::string> items;
      for (const auto& [k, v] : d) items.push_back(PyRepr(k) + ": " + NodeToString(v));
      return fmt::format("{{{}}}", fmt::join(items, ", "));
    }
    std::string operator()(const List& l) const {
      std::vector<std::string> items;
      for (const Node& v : l) items.push_back(NodeToString(v));
      return PyList(items);
    }
    std::string operator()(const ShardedTensor& t) const { return t.ToString(); }
    std::string operator()(const ShardedObject& o) const { return o.ToString(); }
    std::string operator()(const ShardedTensorFactory& f) const {
      return fmt::format("ShardedTensorFactory(key={})", PyRepr(f.key));
    }
    std::string operator()(const LocalNonpersistentObject& n) const {
      return fmt::format("LocalNonpersistentObject(obj={})", n.obj.dump());
    }
    std::string operator()(const Tensor& t) const {
      if (!t.defined()) return "Tensor(undefined)";
      return fmt::format("Tensor(dtype={}, shape={})", DTypeName(t.dtype()),
                         ShapeToString(t.shape()));
    }
    std::string operator()(const nlohmann::json& j) const { return j.dump(); }
  };
  return std::visit(Visitor{}, node.value());
}

std::string NodeTypeRepr(const Node& node) {
  struct Visitor {
    std::string_view operator()(const Dict&) const { return "dict"; }
    std::string_view operator()(const List&) const { return "list"; }
    std::string_view operator()(const ShardedTensor&) const { return "ShardedTensor"; }
    std::string_view operator()(const ShardedObject&) const { return "ShardedObject"; }
    std::string_view operator()(const ShardedTensorFactory&) const {
      return "ShardedTensorFactory";
    }
    std::string_view operator()(const LocalNonpersistentObject&) const {
      return "LocalNonpersistentObject";
    }
    std::string_view operator()(const Tensor&) const { return "torch.Tensor"; }
    std::string_view operator()(const nlohmann::json& j) const {
      switch (j.type()) {
        case nlohmann::json::value_t::null:
          return "NoneType";
        case nlohmann::json::value_t::boolean:
          return "bool";
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned:
          return "int";
        case nlohmann::json::value_t::number_float:
          return "float";
        case nlohmann::json::value_t::string:
          return "str";
        case nlohmann::json::value_t::object:
          return "dict";
        case nlohmann::json::value_t::array:
          return "list";
        default:
          return "bytes";
      }
    }
  };
  return fmt::format("<class '{}'>", std::visit(Visitor{}, node.value()));
}

}  // namespace distckpt
