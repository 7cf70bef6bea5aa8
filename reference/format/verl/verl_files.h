// verl's FSDP checkpoint files (verl/utils/checkpoint/fsdp_checkpoint_manager.py):
// per rank r of a world of W, torch.save of the model's sharded state dict
// (model_world_size_{W}_rank_{r}.pt), of the optimizer's
// (optim_world_size_{W}_rank_{r}.pt: {"state": {index: {"step", "exp_avg",
// "exp_avg_sq", ...}}, "param_groups": [...]}) and of
// {"lr_scheduler", "rng"} (extra_state_world_size_{W}_rank_{r}.pt), plus
// rank 0's huggingface/ folder and fsdp_config.json {"FSDP_version", "world_size"}.
//
// Values are FSDP2 DTensors (torch._tensor._rebuild_from_type_v2 of a
// wrapper subclass whose state holds `_local_tensor` and a `_spec` with the
// device mesh, this rank's mesh coordinate and the placements), read
// through the safe unpickler with IsAllowedVerlGlobal (format/dcp/allow_list.h):
// nothing is executed. A DTensor's chunk follows its placements as torch
// does: per mesh dim in order, Shard(d) takes torch.chunk's piece of the
// current extent of axis d (trailing pieces short or empty), Replicate keeps
// it and makes coordinates other than 0 non-main replicas; the local tensor
// must have exactly that shape. A plain tensor (world size 1, verl#903) is
// the whole tensor, main on rank 0. FSDP1's ShardedTensor values
// (torch.distributed._shard) are not read: refused by the allow-list.
//
// Keys: model tensors keep their FQN; optimizer tensors become
// "optimizer.state.<name>.<fqn>" (the state of parameter index i is that of
// the i-th model key, torch's param_groups order; a count mismatch is an
// error), scalar tensors (Adam's `step`) and other values go to `common`.
//
// Errors: CheckpointError naming the file and key: kIncomplete for a missing
// rank file, kCorruption for malformed contents, kUnsupported for classes or
// placements outside the above.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_FORMAT_VERL_VERL_FILES_H_
#define DISTCKPT_FORMAT_VERL_VERL_FILES_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/env.h"
#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

std::string VerlModelFile(int world_size, int rank);  // model_world_size_{W}_rank_{r}.pt
std::string VerlOptimFile(int world_size, int rank);
std::string VerlExtraFile(int world_size, int rank);

// The world size of the verl checkpoint in `dir`: the W of its
// model_world_size_{W}_rank_0.pt (fsdp_config.json, when present, must agree).
// kIncomplete when there is none, kCorruption for two different W.
// Every file is read through `env` (nullptr = Env::Default()).
int VerlWorldSize(const std::string& dir, Env* env = nullptr);

struct VerlRankState {
  std::vector<ShardedTensor> tensors;  // model then optimizer state, with data
  // {"optimizer": {"param_groups": [...], "state": {"<fqn>": {"step": n, ...}}},
  //  "extra_state": {...} (this rank's lr_scheduler and rng as JSON)}
  nlohmann::json common;
  std::vector<std::string> model_keys;  // in file order
  // The model keys stored as DTensors: the parameters the optimizer holds
  // state for (plain tensors beside them are buffers); all keys when none is
  // a DTensor (world size 1).
  std::vector<std::string> param_keys;
  // The parameters the optimizer's state is indexed by: param_keys less a
  // tied alias (an `lm_head.weight` holding exactly an earlier
  // `embed_tokens.weight`: one parameter, HF's tie_word_embeddings) when the
  // optimizer file counts one parameter fewer.
  std::vector<std::string> state_keys;
  // The device mesh of the first DTensor: {"device_type", "mesh_dim_names",
  // "group_tag", "group_name", "dims"} (null when there is none).
  nlohmann::json mesh;
};

// Whether the verl FSDP checkpoint in `dir` is whole, as far as can be told
// without reading it: one world size W, every rank's model file and, for the
// optimizer and extra state, every rank's file or none; each a regular file
// ending in a zip end-of-central-directory record (torch.save's archive
// written to its end); fsdp_config.json (rank 0 writes it after its own
// files). A ckpt_contents.json (a list of contents, or {"contents": [...]}),
// when present, names the contents that must be there. Returns why it is
// not whole ("" when it is) and sets `contents` to those found ("model",
// "optimizer", "extra") and `world` to W.
std::string VerlCheckpointGap(const std::string& dir, std::vector<std::string>* contents,
                              int* world);

// Rank `rank`'s files (the optimizer and extra-state files when present).
VerlRankState ReadVerlRank(const std::string& dir, int world_size, int rank, Env* env = nullptr);

// Makes the ranks' common optimizer state one: a parameter's scalar state
// (Adam's step) missing on a rank is taken from the first rank holding it
// (FSDP1 use_orig_params=True: a rank holds no state for a parameter outside
// its shard), and the FSDP1 units and alignment every rank inferred must
// agree (kUnsupported naming `dir` and the rank otherwise).
void ReconcileVerlRanks(std::vector<VerlRankState>& ranks, const std::string& dir);

// The rank's extra state as the ShardedObject "extra_state" of global shape
// {W} at {rank} (RNG states differ per rank).
ShardedObject VerlExtraStateObject(const VerlRankState& state, int world_size, int rank);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_VERL_VERL_FILES_H_
