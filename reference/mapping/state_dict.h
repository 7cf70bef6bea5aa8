// The nested state-dict tree (docs/megatron-semantics.md §1, §1.6).
//
// A Node is a dict (ordered by key), a list, or a leaf: ShardedTensor,
// ShardedObject, ShardedTensorFactory, LocalNonpersistentObject, a plain
// Tensor (what load returns in place of a ShardedTensor) or a common value
// (JSON: numbers, strings, nested JSON...). Dict keys are strings; Megatron's
// int keys are written as their decimal string.
//
// Thread-safety: value types; tensors inside share storage on copy.
#ifndef DISTCKPT_MAPPING_STATE_DICT_H_
#define DISTCKPT_MAPPING_STATE_DICT_H_

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"
#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

class Node;
using Dict = std::map<std::string, Node>;
using List = std::vector<Node>;
using StateDict = Node;  // by convention a dict at top level

// ShardedTensorFactory (§1.4): builds a sub-tree of ShardedTensors at save and
// load time, and merges the loaded sub-tree back into one Tensor.
struct ShardedTensorFactory {
  using BuildFn =
      std::function<Node(const std::string& key, const Tensor& data, const ReplicaId& replica_id,
                         const std::optional<FlatRange>& flattened_range)>;
  using MergeFn = std::function<Tensor(const Node& loaded)>;
  std::string key;
  Tensor data;
  BuildFn build_fn;
  MergeFn merge_fn;
  ReplicaId replica_id{0};
  std::optional<FlatRange> flattened_range;

  Node Build() const;
};

class Node {
 public:
  using Value = std::variant<Dict, List, ShardedTensor, ShardedObject, ShardedTensorFactory,
                             LocalNonpersistentObject, Tensor, nlohmann::json>;
  Node() : value_(Dict{}) {}
  Node(Dict d) : value_(std::move(d)) {}
  Node(List l) : value_(std::move(l)) {}
  Node(ShardedTensor t) : value_(std::move(t)) {}
  Node(ShardedObject o) : value_(std::move(o)) {}
  Node(ShardedTensorFactory f) : value_(std::move(f)) {}
  Node(LocalNonpersistentObject n) : value_(std::move(n)) {}
  Node(Tensor t) : value_(std::move(t)) {}
  Node(nlohmann::json j) : value_(std::move(j)) {}

  template <typename T>
  bool is() const {
    return std::holds_alternative<T>(value_);
  }
  template <typename T>
  T& as() {
    return std::get<T>(value_);
  }
  template <typename T>
  const T& as() const {
    return std::get<T>(value_);
  }
  template <typename T>
  T* get_if() {
    return std::get_if<T>(&value_);
  }
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&value_);
  }
  bool is_container() const { return is<Dict>() || is<List>(); }
  Value& value() { return value_; }
  const Value& value() const { return value_; }

  // Dict access; operator[] inserts (turning an empty node into a dict).
  Node& operator[](const std::string& key);
  const Node& at(const std::string& key) const;  // throws CheckpointError naming the key

 private:
  Value value_;
};

// A path from the root: dict keys and list indices (as strings); printed
// joined with '.' in messages ("decoder.layers.0.weight").
using NodePath = std::vector<std::string>;
std::string PathToString(const NodePath& path);

// Python-like text of a node for messages: a leaf's repr (ShardedTensor(...),
// JSON dumped), containers as {'k': v} / [v].
std::string NodeToString(const Node& node);
// Python's repr of the node's type, as Megatron's messages print it:
// "<class 'dict'>", "<class 'int'>", "<class 'torch.Tensor'>", ...
std::string NodeTypeRepr(const Node& node);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_STATE_DICT_H_
