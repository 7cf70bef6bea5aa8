// FSDP1's flat parameters (torch/distributed/fsdp/_flat_param.py) as verl's
// FSDPCheckpointManager saves their optimizer state with use_orig_params=False:
// torch's optimizer.state_dict() over one FlatParameter per FSDP unit, each
// rank holding the 1-D shard [r * S, (r + 1) * S) of the unit's parameters
// flattened and concatenated in module order (no alignment padding), the
// total padded at the tail to S * W with S = ceil(total / W) (torch.chunk's
// first chunk, _get_shard).
//
// Which parameters form which unit is not recorded: InferFsdp1Units finds it
// from the model keys (in state-dict order = module order), their sizes and
// the saved shard sizes, the way FSDP1 wraps: unit 0 is the root (every
// parameter outside the nested units; absent when it holds none), the others
// are module subtrees (a key prefix ending at a '.'), disjoint, in module
// order. Exactly one such partition must fit the shard sizes.
//
// Errors: CheckpointError(kUnsupported) naming `what` when no partition or
// more than one fits. Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_VERL_FSDP1_FLAT_H_
#define DISTCKPT_FORMAT_VERL_FSDP1_FLAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/box.h"

namespace distckpt {

struct Fsdp1Unit {
  std::string prefix;          // "" for the root unit, else "model.layers.0."
  std::vector<size_t> params;  // indices into the keys, in flat order
  int64_t total = 0;           // unpadded numel
};

// keys / numels: the model's parameters in state-dict order; shard_sizes:
// each flat parameter's per-rank numel, in optimizer order.
std::vector<Fsdp1Unit> InferFsdp1Units(const std::vector<std::string>& keys,
                                       const std::vector<int64_t>& numels,
                                       const std::vector<int64_t>& shard_sizes, int64_t world,
                                       const std::string& what);

// The units FSDP1 builds under verl's default wrap policy when nothing else
// says: each decoder layer (a key prefix "...layers.<n>.") is a unit, the
// rest the root. Used when converting an FSDP2 checkpoint to FSDP1.
std::vector<Fsdp1Unit> DefaultFsdp1Units(const std::vector<std::string>& keys,
                                         const std::vector<int64_t>& numels);

int64_t Fsdp1ShardSize(int64_t total, int64_t world);  // ceil(total / world)

// One parameter's part of a rank's flat shard: elements [param.start,
// param.stop) of the parameter's flattening sit at [local.start, local.stop)
// of the rank's 1-D shard.
struct Fsdp1Piece {
  size_t param = 0;  // index into the keys
  FlatRange in_param;
  FlatRange in_shard;
};
std::vector<Fsdp1Piece> Fsdp1RankPieces(const Fsdp1Unit& unit, const std::vector<int64_t>& numels,
                                        int64_t world, int64_t rank);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_VERL_FSDP1_FLAT_H_
