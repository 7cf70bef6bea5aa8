// Tree utilities with Megatron's dict_utils semantics (docs/megatron-semantics.md §1.6)
// plus the pre-processing of state_dict_utils (§1.8).
//
// Thread-safety: pure functions over values.
#ifndef DISTCKPT_MAPPING_DICT_UTILS_H_
#define DISTCKPT_MAPPING_DICT_UTILS_H_

#include <functional>
#include <utility>
#include <vector>

#include "mapping/state_dict.h"

namespace distckpt {

// extract_matching_values: (matching, nonmatching), hierarchy preserved.
// Throws for a non-container top level ("Unexpected top-level object type: ...").
std::pair<Node, Node> ExtractMatching(const Node& x, const std::function<bool(const Node&)>& pred,
                                      bool return_lists_as_dicts = false);
// merge(x1, x2) in place into x1; Megatron's messages for list length and duplicate leaves.
void Merge(Node& x1, const Node& x2);
void Merge(Node& x1, Node&& x2);  // the same, moving x2's pieces
// diff: paths only in left, only in right, and mismatching leaves (tensors by
// bytes, sharded leaves by data, JSON by value). Empty = equal.
struct TreeDiff {
  std::vector<NodePath> only_left;
  std::vector<NodePath> only_right;
  std::vector<NodePath> mismatch;
  bool empty() const { return only_left.empty() && only_right.empty() && mismatch.empty(); }
};
TreeDiff Diff(const Node& x1, const Node& x2);

// Visits every leaf (non-container) with its path; mutable and const forms.
void ForEachLeaf(Node& x, const std::function<void(const NodePath&, Node&)>& fn);
void ForEachLeaf(const Node& x, const std::function<void(const NodePath&, const Node&)>& fn);

// apply_factories: replaces every factory by its Build() in place.
void ApplyFactories(Node& x);
// apply_factory_merges(x1, factories): Megatron's messages (§1.4).
void ApplyFactoryMerges(Node& loaded, const Node& factories);

// The pieces of a state dict that save/load work on (§1.8).
struct SavePieces {
  Node sharded;  // ShardedTensors and ShardedObjects (factories applied), empty flat ranges dropped
  Node common;   // everything else except nonpersistent objects
};
SavePieces SavePreprocess(const Node& state_dict);
// A container whose every leaf is a ShardedTensor or ShardedObject (no empty
// flat range) and that holds no empty container below its top: its sharded
// piece is itself, and it has no common state (save) or nonpersistent
// objects and factories (load); callers may read it in place.
bool IsShardedOnly(const Node& tree);

class LoadPieces {
 public:
  LoadPieces() = default;
  LoadPieces(Node sharded, Node nonpersistent, Node factories)
      : nonpersistent(std::move(nonpersistent)),
        factories(std::move(factories)),
        sharded_(std::move(sharded)) {}
  // Pieces of a request whose every leaf is a ShardedTensor or ShardedObject
  // (no empty flat range) and that holds no empty container below its top:
  // its sharded part is the request itself, read in place (no copy of every
  // leaf per load); `request` must outlive the pieces.
  static LoadPieces OfShardedRequest(const Node& request);

  // ShardedTensors / ShardedObjects to load (factories applied).
  const Node& sharded() const { return request_ ? *request_ : sharded_; }
  // The same, copied out of the request first when it is read in place.
  Node& mutable_sharded();

  Node nonpersistent;  // unwrapped LocalNonpersistentObject values
  Node factories;      // the factories, to merge after load

 private:
  Node sharded_;
  const Node* request_ = nullptr;
};
LoadPieces LoadPreprocess(const Node& state_dict);

// The same pieces by Megatron's sequence of passes, which the functions above
// take only for a tree holding a factory, a nonpersistent object or an empty
// flattened range (else one split gives the same); for tests.
SavePieces SavePreprocessInPasses(const Node& state_dict);
LoadPieces LoadPreprocessInPasses(const Node& state_dict);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_DICT_UTILS_H_
