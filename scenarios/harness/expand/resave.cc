#include "harness/expand/resave.h"

#include <string>

#include "mapping/dict_utils.h"

namespace distckpt {
namespace {

// The node at `path` in `root` (dict keys; list indices as numbers), or nullptr.
Node* Find(Node& root, const NodePath& path) {
  Node* at = &root;
  for (const std::string& step : path) {
    if (Dict* d = at->get_if<Dict>()) {
      auto it = d->find(step);
      if (it == d->end()) return nullptr;
      at = &it->second;
    } else if (List* l = at->get_if<List>()) {
      size_t i = 0;
      try {
        i = std::stoul(step);
      } catch (const std::exception&) {
        return nullptr;
      }
      if (i >= l->size()) return nullptr;
      at = &(*l)[i];
    } else {
      return nullptr;
    }
  }
  return at;
}

// The node at `path` in `root`, creating dicts on the way (dict paths only).
Node* FindOrCreate(Node& root, const NodePath& path) {
  Node* at = &root;
  for (const std::string& step : path) {
    Dict* d = at->get_if<Dict>();
    if (!d) return nullptr;
    at = &(*d)[step];
  }
  return at;
}

// Whether `x` holds a leaf that a save stores apart from the common state.
bool HoldsShardedLeaf(const Node& x) {
  bool found = false;
  ForEachLeaf(x, [&](const NodePath&, const Node& leaf) {
    found = found || leaf.is<ShardedTensor>() || leaf.is<ShardedObject>() ||
            leaf.is<ShardedTensorFactory>();
  });
  return found;
}

// Adds to `out` the dicts of `request` it lacks that the first save kept in
// the common state: dicts with no sharded leaf (an empty "extra" dict), as
// Megatron's extract_matching_values keeps them. A dict whose sharded leaves
// were all left unloaded (a non-strict load of keys the checkpoint lacks)
// stays out: its first save had stored nothing of it in common.
void AddMissingDicts(const Node& request, Node& out) {
  const Dict* from = request.get_if<Dict>();
  Dict* to = out.get_if<Dict>();
  if (!from || !to) return;
  for (const auto& [key, child] : *from) {
    if (!child.is<Dict>()) continue;
    auto it = to->find(key);
    if (it == to->end()) {
      if (HoldsShardedLeaf(child)) continue;
      it = to->emplace(key, Dict{}).first;
    }
    AddMissingDicts(child, it->second);
  }
}

}  // namespace

Node ResaveState(const Node& request, const Node& loaded) {
  Node out = loaded;
  AddMissingDicts(request, out);
  ForEachLeaf(request, [&](const NodePath& path, const Node& leaf) {
    if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) {
      ShardedTensor resaved = *t;
      Node* value = Find(out, path);
      if (value && value->is<Tensor>()) {
        resaved.data = value->as<Tensor>();
        *value = Node(std::move(resaved));
      } else if (!value && t->flattened_range && t->flattened_range->size() == 0) {
        resaved.data = Tensor::Empty(t->dtype, {0});
        if (Node* slot = FindOrCreate(out, path)) *slot = Node(std::move(resaved));
      }
    } else if (const ShardedObject* o = leaf.get_if<ShardedObject>()) {
      if (Node* value = Find(out, path); value && value->is<nlohmann::json>()) {
        ShardedObject resaved = *o;
        resaved.data = value->as<nlohmann::json>();
        *value = Node(std::move(resaved));
      }
    } else if (const ShardedTensorFactory* f = leaf.get_if<ShardedTensorFactory>()) {
      if (Node* value = Find(out, path); value && value->is<Tensor>()) {
        ShardedTensorFactory resaved = *f;
        resaved.data = value->as<Tensor>();
        *value = Node(std::move(resaved));
      }
    } else if (leaf.is<LocalNonpersistentObject>()) {
      if (Node* value = Find(out, path)) *value = leaf;  // save drops it again
    }
  });
  return out;
}

void KeepStoredRecords(Node& state, CheckpointReader& reader) {
  const std::map<std::string, StoredObject>& stored = reader.metadata().objects;
  ForEachLeaf(state, [&](const NodePath&, Node& leaf) {
    ShardedObject* o = leaf.get_if<ShardedObject>();
    if (!o || !IsMainReplica(o->replica_id)) return;
    if (auto it = stored.find(o->UniqueKey()); it != stored.end()) {
      o->record = reader.ReadObjectRecord(it->second);
    }
  });
}

}  // namespace distckpt
