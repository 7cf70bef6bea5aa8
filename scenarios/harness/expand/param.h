// Param: one leaf of a rank's generated state dict, as the scenario layer
// expands it from tensor specs and model generators.
//
// `pieces` are the ShardedTensors the leaf saves (metadata, no data): one for
// a plain shard; several for a ShardedTensorFactory leaf (Megatron's GLU
// fc1 split into W and V halves), whose local data is the pieces'
// data concatenated along the first local axis.
//
// Thread-safety: value type.
#ifndef DISTCKPT_SCENARIO_PARAM_H_
#define DISTCKPT_SCENARIO_PARAM_H_

#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

struct Param {
  std::string path;                   // dict path under "tensors"
  std::vector<ShardedTensor> pieces;  // >= 1; all share key, dtype, global shape
  Shape logical_shape;                // unpadded global shape: values beyond it are zero
  std::optional<DType> load_dtype;    // the request's dtype, when it differs

  const std::string& key() const { return pieces.front().key; }
  bool is_factory() const { return pieces.size() > 1; }
};

struct ObjectParam {
  std::string path;  // dict path under "objects"
  ShardedObject object;
};

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_PARAM_H_
