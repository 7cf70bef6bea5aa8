// Resharding a verl FSDP checkpoint to another world size (what verl's own
// FSDPCheckpointManager cannot: its load_checkpoint opens
// *_world_size_{its own W}_rank_{r}.pt): the per-rank files verl would have
// written from N ranks, for FSDP1 or FSDP2 (verl/utils/checkpoint/
// fsdp_checkpoint_manager.py, verl/utils/fsdp_utils.py).
//
// - Model: model_world_size_N_rank_n.pt, a dict FQN -> DTensor on a
//   1-D mesh of N ranks (the source's device type, mesh dim names and
//   process-group names; coordinate n). FSDP1: Shard(0); FSDP2: verl's
//   shard_placement_fn (the first dim divisible by N, else 0). Local tensors
//   are torch.chunk's pieces.
// - Optimizer: FSDP2: {"state": {i: {"step", <tensor states as DTensors
//   placed as their parameter>}}, "param_groups"} by model parameter order;
//   FSDP1 (use_orig_params=False): one flat 1-D shard per FSDP unit
//   (fsdp1_flat.h), zero tail padding; the units are the source's (FSDP1) or
//   verl's default wrap (each decoder layer; FSDP2 -> FSDP1); for a
//   use_orig_params=True source, per parameter: its 1-D piece of the rank's
//   shard of the source's aligned units (none where empty). param_groups as
//   the source's, their params renumbered (tuples become lists).
// - extra_state_world_size_N_rank_n.pt: source rank n mod W's file, bytes
//   unchanged (lr scheduler identical on every rank; the RNG state is
//   per rank: ranks n >= W repeat rank n mod W's streams, source ranks >= N
//   are dropped: both named in the report).
// - fsdp_config.json {"FSDP_version", "world_size": N}; huggingface/ and any
//   other plain file copied.
// A verl step directory (global_step_K: component folders actor/, critic/,
// plus data.pt) is resharded component by component; data.pt (the
// dataloader's state, one per step, not per rank) is kept.
//
// Every tensor is assembled whole in memory (a model's full size at a
// time). `dst` must not exist (nothing is replaced); on an error the partial
// output is removed.
//
// Errors: CheckpointError naming the file and key (kInvalidArgument for bad
// options or an existing destination, kUnsupported for meshes of more than
// two dimensions, FSDP1 HSDP output or several parameter groups under FSDP1).
// Replicas (HSDP) must hold equal values (kCorruption naming the rank).
//
// Thread-safety: one call at a time per destination.
#ifndef DISTCKPT_FORMAT_VERL_VERL_RESHARD_H_
#define DISTCKPT_FORMAT_VERL_VERL_RESHARD_H_

#include <string>
#include <vector>

namespace distckpt {

struct VerlReshardOptions {
  int world_size = 0;
  int fsdp_version = 0;  // 1 or 2; 0: the source's
  // HSDP (verl's fsdp_config.fsdp_size): ranks per shard group; the new mesh
  // is (world / fsdp_size, fsdp_size), ("ddp", "fsdp"), placements
  // (Replicate(), Shard(d)), FSDP2 only. 0: the source's when it is HSDP and
  // its fsdp_size divides the new world (else 1-D); -1 or >= world: 1-D.
  int fsdp_size = 0;
};

struct VerlReshardReport {
  std::vector<std::string> lines;  // what was written, and per-rank state's fate
};

VerlReshardReport ReshardVerl(const std::string& src, const std::string& dst,
                              const VerlReshardOptions& options);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_VERL_VERL_RESHARD_H_
