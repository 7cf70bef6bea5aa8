// Hugging Face export / import of Megatron GPT checkpoints (distckpt export
// --to hf, distckpt import --from hf).
//
// The model's fields come from one function, GptExportSpecFromFile: a JSON
// file holding {"layers", "hidden", "heads", "ffn", "vocab", "glu", "tied",
// "prefix", "query_groups"} or a scenario file whose "model" section holds
// them (the first GPT model). `--spec gpt` inference from the checkpoint's
// metadata plugs in here (GptExportSpecFromJson of the inferred model section).
//
// Names (Llama): embedding.word_embeddings.weight -> model.embed_tokens.weight
// (vocab padding dropped); decoder.layers.* (stacked on a layer axis or one
// key per layer) -> model.layers.{i}.*: linear_qkv split per query group in
// Megatron's interleaved order [q of the group's heads, k, v] into
// self_attn.q_proj / k_proj / v_proj; linear_proj -> self_attn.o_proj;
// input_layernorm, pre_mlp_layernorm (or TransformerEngine's fused
// linear_qkv.layer_norm_weight, linear_fc1.layer_norm_weight) -> input_layernorm,
// post_attention_layernorm; SwiGLU linear_fc1 [gate; up] -> mlp.gate_proj,
// mlp.up_proj (without GLU: mlp.up_proj); linear_fc2 -> mlp.down_proj;
// decoder.final_layernorm -> model.norm; output_layer -> lm_head (absent
// when tied: config.json says tie_word_embeddings). Biases map alike.
#ifndef DISTCKPT_CLI_HF_H_
#define DISTCKPT_CLI_HF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "format/format.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

struct GptExportSpec {
  std::string prefix;
  int64_t layers = 0, hidden = 0, heads = 0, query_groups = 0, ffn = 0, vocab = 0;
  bool glu = false, tied = false;
  int64_t head_dim() const { return hidden / heads; }
};

GptExportSpec GptExportSpecFromFile(const std::string& path);
// The same from JSON (a model section, or an object holding "model");
// errors name `source`.
GptExportSpec GptExportSpecFromJson(nlohmann::json json, const std::string& source);

// One piece of an HF tensor: `shape` elements of Megatron tensor `key` at
// `offset` (global coordinates; the pieces of a tensor, in order, are its
// row-major bytes).
struct HfPiece {
  std::string key;
  Shape offset, shape;
};
struct HfTensor {
  std::string name;
  Shape shape;
  std::vector<HfPiece> pieces;
};

// The HF tensors of a checkpoint whose tensors are `keys` with `shapes`
// (global, prepended axes included), in Llama order. Throws
// CheckpointError(kShapeMismatch / kKeyMismatch / kUnsupported) naming the key.
std::vector<HfTensor> PlanHfExport(const GptExportSpec& spec,
                                   const std::vector<std::pair<std::string, Shape>>& stored);

// Megatron's own names, one tensor per layer, for export --to fsdp-dtensor:
// every model tensor of the checkpoint (not "optimizer.*") under its name
// without the spec's prefix; stacked layers unstacked into
// "decoder.layers.<i>.<name>"; with GLU, linear_fc1.weight (and .bias) split
// into "..._w" (rows [0, ffn): W of every TP rank) and "..._v" (V), as
// Megatron's handle_swiglu_in_state_dict names them.
std::vector<HfTensor> PlanMegatronPerLayer(
    const GptExportSpec& spec, const std::vector<std::pair<std::string, Shape>>& stored);

// A checkpoint opened for export: its reader and its tensors' metadata
// (LoadTensorsMetadata), by key for ReadPieces and as (key, global shape) in
// key order for the plans.
struct ExportSource {
  std::unique_ptr<CheckpointReader> reader;
  std::map<std::string, ShardedTensor> tensors;
  std::vector<std::pair<std::string, Shape>> shapes;
};
ExportSource OpenExportSource(const std::string& checkpoint, Env* env);

// The global tensor `t` (its pieces, in order) read from `reader` in `dtype`.
// `stored`: the checkpoint's tensors (LoadTensorsMetadata) by key.
Tensor ReadPieces(CheckpointReader& reader, const std::map<std::string, ShardedTensor>& stored,
                  const HfTensor& t, DType dtype);

struct ExportArgs {
  std::string checkpoint, to = "hf", out, spec, max_shard_size = "5GB", dtype;
  std::string config;             // --spec names: a config.json to copy
  std::string topology;           // --to fsdp-dtensor: the ranks' layout, dp=N[,tp=T]
  std::vector<std::string> sets;  // --set field=value, with --spec gpt
  nlohmann::json model;           // the model section --spec gpt inferred (null: read `spec`)
};
struct ImportArgs {
  std::string out, from = "hf", dir, spec, topology, format = "native";
};
// export --spec names: every stored tensor but the optimizer's ("optimizer."
// keys) under its own key, whole, in key order (verl's FSDP checkpoints hold
// a Hugging Face model's state dict, so its keys are already HF names).
std::vector<HfTensor> PlanVerbatimExport(const std::vector<std::pair<std::string, Shape>>& stored);
// Parses "5GB", "500MB", "100KB", "123" (bytes; decimal units as HF's).
uint64_t ParseByteSize(const std::string& text);

struct ExportSummary {
  size_t tensors = 0, files = 0;
  uint64_t total_bytes = 0, largest_tensor_bytes = 0;
};
// Streams the export: one HF tensor's buffer in memory at a time.
ExportSummary ExportToHf(const ExportArgs& args);
// export --to fsdp-dtensor (cli/fsdp_dtensor_export.cc): Megatron's
// `--ckpt-format fsdp_dtensor` checkpoint of a GPT checkpoint as
// `args.topology` (dp=N[,tp=T]; mesh (dp, tp), rank = d*tp + t) holds it:
// PlanMegatronPerLayer's tensors under "model.module.<name>" in float32
// (the fp32 main weights: optimizer.state.fp32_param.* when the checkpoint
// has them), Adam moments under "optimizer.state.<P><name>.exp_avg" /
// ".exp_avg_sq" with P = "module.module.module." for a bf16/f16 model
// (Float16Module wraps it) else "module.module."; each parameter's rows split
// over DP as Megatron-FSDP's buckets (fsdp/layout.h, one bucket per layer
// and one for the rest), TP's shard cut first (Shard(tp_dim) inside); a
// rank with no rows writes nothing. Common state: the checkpoint's, plus
// checkpoint_version 3.0 and iteration 0 when absent. Objects (rng_state,
// _extra_state) are not exported. pp, cp, ep and HSDP are refused.
struct FsdpDtensorExportSummary {
  int ranks = 0;
  size_t model_tensors = 0, optimizer_tensors = 0, chunks = 0, objects_dropped = 0;
  uint64_t bytes_written = 0;
};
FsdpDtensorExportSummary ExportToFsdpDtensor(const ExportArgs& args);
// --to hf, --to fsdp-dtensor, or --to native|dcp|dcp-1.13 (ConvertCheckpoint).
int ExportCommand(const ExportArgs& args);

// Writes a checkpoint into `out` (refused if one is committed there) from one
// writer, rank 0, holding the save lock: `fill` writes chunks and objects;
// the commit takes topology, common and content from `like`. Returns the
// bytes written.
uint64_t WriteWithOneWriter(Env* env, const std::string& out, const Format& format,
                            const CheckpointMetadata& like,
                            const std::function<void(CheckpointWriter&)>& fill);
// The same with `ranks` writers (rank r writes its own files), all in this
// process; the commit also takes `like.topology`.
uint64_t WriteWithRankWriters(
    Env* env, const std::string& out, const Format& format, const CheckpointMetadata& like,
    int ranks, const std::function<void(std::vector<std::unique_ptr<CheckpointWriter>>&)>& fill);

// `src` (any format, any layout) rewritten in `format` to `out`: every
// tensor as one whole chunk, read and written one global tensor at a time
// (memory: the largest tensor); objects, common state and the recorded
// topology kept, so `diff src out` is identical. Objects whose reader gives a
// record in `format`'s ObjectRecordEncoding (DCP, zarr -> dcp) are written as
// stored, and so is the common state (CommonRecord) for a format that keeps it
// as an object; the rest from their JSON values.
struct ConvertSummary {
  size_t tensors = 0, objects = 0;
  uint64_t bytes_written = 0, largest_tensor_bytes = 0;
};
ConvertSummary ConvertCheckpoint(const std::string& src, const std::string& out,
                                 const Format& format);

// import --from hf (cli/hf_import.cc): the HF model in `dir` saved under
// `topology` as the spec's Megatron GPT state (tensors only: no objects).
struct ImportSummary {
  size_t tensors = 0;
  uint64_t bytes_written = 0;
  std::vector<std::string> unused;  // HF tensors no Megatron key maps from
};
ImportSummary ImportFromHf(const ImportArgs& args);
// export --spec gpt: the GPT model section inferred from the checkpoint's
// metadata with args.sets applied (harness InferGptModel; refused naming the
// field it cannot decide, e.g. heads). Printed as "spec gpt inferred: {...}".
nlohmann::json InferExportModel(const ExportArgs& args);
int ImportCommand(const ImportArgs& args);

}  // namespace distckpt

#endif  // DISTCKPT_CLI_HF_H_
