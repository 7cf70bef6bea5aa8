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
// use_orig_params=True (verl's actor.fsdp_config.use_orig_params): FSDP1
// aligns each parameter's start in the flat parameter to `align` elements
// (16 bytes of the compute dtype, torch's _get_aligned_numel: 4 for fp32, 8
// for bf16) with padding between, and pads the total to a multiple of W. The
// optimizer then holds each original parameter: its state on rank r is the
// 1-D piece of the parameter inside [r * S, (r + 1) * S), and no state where
// that piece is empty. InferFsdp1OrigUnits finds units and alignment from
// the piece sizes one rank holds.
//
// Errors: CheckpointError(kUnsupported) naming `what` when no partition or
// more than one fits. Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_VERL_FSDP1_FLAT_H_
#define DISTCKPT_FORMAT_VERL_FSDP1_FLAT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/box.h"

namespace distckpt {

struct Fsdp1Unit {
  std::string prefix;          // "" for the root unit, else "model.layers.0."
  std::vector<size_t> params;  // indices into the keys, in flat order
  int64_t total = 0;           // numel before the tail padding (alignment gaps included)
  int64_t align = 0;           // use_orig_params=True: starts aligned to this; 0: packed
};

// Sets unit.align and unit.total (the end of its last parameter).
void SetFsdp1Align(Fsdp1Unit& unit, const std::vector<int64_t>& numels, int64_t align);

// use_orig_params=True: the units (root first, then disjoint module subtrees,
// as InferFsdp1Units) and alignment (4, 8, 2 or 16 elements) under which
// each rank r in `pieces` of `world` holds exactly `pieces[r][i]` elements
// of key i (0: no state). verl's default wrap (DefaultFsdp1Units) is taken
// when it fits; otherwise exactly one layout must. When several layouts fit
// and `ambiguous` is given, sets it and returns nothing (the caller adds
// another rank's pieces); else kUnsupported.
std::vector<Fsdp1Unit> InferFsdp1OrigUnits(const std::vector<std::string>& keys,
                                           const std::vector<int64_t>& numels,
                                           const std::map<int64_t, std::vector<int64_t>>& pieces,
                                           int64_t world, const std::string& what,
                                           bool* ambiguous = nullptr);

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
