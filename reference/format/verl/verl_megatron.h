// verl's Megatron checkpoints (verl/utils/checkpoint/megatron_checkpoint_manager.py,
// verl b178a3cd): a component folder (global_step_N/actor, critic, ...) holds
//   dist_ckpt/                Megatron-Core dist_checkpointing.save (torch_dist) of
//                             {"model": GPTModel.sharded_state_dict(),
//                              "optimizer": optimizer.sharded_state_dict(...),
//                              "lr_scheduler": ..., "rng_state": ShardedObject};
//                             metadata.json is its last file
//   huggingface/config.json   rank 0's HF config (and tokenizer)
//   transformer_config.json   rank 0's TransformerConfig (dataclasses.asdict)
// The dist_ckpt folder is a Megatron torch_dist checkpoint: everything distckpt
// does with those applies. What it lacks is Megatron's training args (verl
// never saves them); the architecture sizes are in transformer_config.json.
//
// Thread-safety: pure functions over `env`.
#ifndef DISTCKPT_FORMAT_VERL_VERL_MEGATRON_H_
#define DISTCKPT_FORMAT_VERL_VERL_MEGATRON_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "format/checkpoint_metadata.h"
#include "io/env.h"

namespace distckpt {

inline constexpr char kVerlDistCkptDir[] = "dist_ckpt";
inline constexpr char kVerlTransformerConfig[] = "transformer_config.json";

// True when `component` (e.g. global_step_N/actor) holds verl's dist_ckpt/
// with Megatron's metadata.json naming a sharded backend (the save finished),
// or a committed native checkpoint (`reshard --format native` of a verl root).
bool IsVerlMegatronComponent(Env* env, const std::string& component);

// Where a verl Megatron checkpoint given as `path` is read from: `path` itself
// when it is a component (PATH/dist_ckpt), or a step folder's component
// (PATH/actor/dist_ckpt; without actor/ the only component). nullopt when
// `path` is neither. *component gets the component folder.
std::optional<std::string> VerlMegatronDistCkpt(Env* env, const std::string& path,
                                                std::string* component = nullptr);

// Megatron-args-like JSON ("num_attention_heads", "num_query_groups",
// "group_query_attention", "swiglu", "num_layers", "hidden_size",
// "ffn_hidden_size") from the transformer_config.json beside `dist_ckpt_dir`,
// "vocab_size" from huggingface/config.json and make_vocab_size_divisible_by
// 1 (verl's GPTModel has the HF vocab, unpadded); nullopt when there is no
// transformer_config.json. A malformed file: kCorruption naming it.
std::optional<nlohmann::json> VerlMegatronArgs(Env* env, const std::string& dist_ckpt_dir);

// md.common["args"] from VerlMegatronArgs when the checkpoint in `dir`
// stores no Megatron args of its own (what `--spec gpt` infers from).
void AddVerlMegatronArgs(Env* env, const std::string& dir, CheckpointMetadata& md);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_VERL_VERL_MEGATRON_H_
