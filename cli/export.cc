// distckpt export: a checkpoint to HF safetensors shards, Megatron's
// fsdp_dtensor layout or another format; the work is the library's
// (interop/hf/export.h, interop/fsdp_dtensor_export.h, interop/convert.h).
#include "interop/hf/export.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "format/format.h"
#include "format/verl/verl_megatron.h"
#include "harness/tools/request_spec.h"
#include "interop/convert.h"
#include "interop/fsdp_dtensor_export.h"

namespace distckpt {
namespace {

// export --spec gpt: the GPT model section inferred from the checkpoint's
// metadata with args.sets applied (harness InferGptModel; refused naming the
// field it cannot decide, e.g. heads). Printed as "spec gpt inferred: {...}".
nlohmann::json InferExportModel(const ExportArgs& args) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader =
      DetectFormat(env, args.checkpoint).OpenReader(env, args.checkpoint);
  const SpecOverrides overrides = ParseSpecOverrides(args.sets);
  CheckpointMetadata md = reader->metadata();
  AddVerlMegatronArgs(env, args.checkpoint, md);  // verl's dist_ckpt: transformer_config.json
  nlohmann::json model = InferGptModel(md, overrides);
  // Every stored vocab row is exported unless --set vocab says how many are
  // the tokenizer's: the args' vocab_size need not count the tokenizer's
  // special tokens (NullTokenizer adds one), so only the user can say which
  // rows are padding.
  if (!overrides.count("vocab")) {
    const std::string prefix = model.value("prefix", "");
    for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"}) {
      auto it = reader->metadata().tensors.find(prefix + name);
      if (it != reader->metadata().tensors.end() && it->second.global_shape.size() == 2) {
        model["vocab"] = it->second.global_shape[0];
        break;
      }
    }
  }
  std::cout << "spec gpt inferred: " << model.dump() << "\n";
  return model;
}

// --to hf, --to fsdp-dtensor, or --to native|dcp|dcp-1.13 (ConvertCheckpoint).
int ExportCommand(const ExportArgs& args) {
  if (args.to == "hf") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument, "export --to hf needs --spec (the model's fields)");
    }
    ExportSummary s = ExportToHf(args);
    std::cout << fmt::format(
        "exported {} tensors ({} bytes) from {} to {}: {} file(s), largest tensor {} bytes{}\n",
        s.tensors, s.total_bytes, args.checkpoint, args.out, s.files, s.largest_tensor_bytes,
        s.architecture.empty() ? "" : ", architecture " + s.architecture);
    const ExportAccount& a = s.account;
    std::cout << fmt::format(
        "model tensors: {} stored ({} bytes): {} bytes exported, {} bytes vocab padding, {} bytes "
        "dropped (--drop); skipped: {} optimizer tensors, {} objects (rng_state, _extra_state, "
        "common state: not weights)\n",
        a.model_tensors, a.model_bytes, a.exported_bytes, a.padding_bytes, a.dropped_bytes,
        a.optimizer_tensors, s.objects_skipped);
    for (const std::string& p : a.padding) std::cout << "  padding: " << p << "\n";
    for (const std::string& d : a.dropped) std::cout << "  dropped: " << d << "\n";
    return 0;  // kExitOk
  }
  if (args.to == "fsdp-dtensor") {
    if (args.spec.empty() && args.model.is_null()) {
      Fail(ErrorKind::kInvalidArgument,
           "export --to fsdp-dtensor needs --spec (the model's fields) and --topology dp=N[,tp=T]");
    }
    FsdpDtensorExportSummary s = ExportToFsdpDtensor(args);
    std::cout << fmt::format(
        "exported {} to {} (fsdp-dtensor, {} ranks): {} model tensors, {} optimizer tensors, {} "
        "chunks, {} bytes written; {} objects not exported\n",
        args.checkpoint, args.out, s.ranks, s.model_tensors, s.optimizer_tensors, s.chunks,
        s.bytes_written, s.objects_dropped);
    return 0;  // kExitOk
  }
  ConvertSummary s = ConvertCheckpoint(args.checkpoint, args.out, FormatByName(args.to));
  std::cout << fmt::format(
      "converted {} to {} ({} format): {} tensors, {} objects, {} bytes written, largest tensor {} "
      "bytes\n",
      args.checkpoint, args.out, args.to, s.tensors, s.objects, s.bytes_written,
      s.largest_tensor_bytes);
  return 0;  // kExitOk
}

}  // namespace

Command AddExportCommand(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* exp = app.add_subcommand(
      "export",
      "a checkpoint (any topology, format) to Hugging Face safetensors shards, Megatron's "
      "fsdp_dtensor layout or another format");
  exp->add_option("checkpoint", args->checkpoint, "checkpoint directory")->required();
  exp->add_option("--to", args->to,
                  "hf (default), fsdp-dtensor (Megatron's --ckpt-format fsdp_dtensor: per-layer "
                  "keys, uneven FSDP chunks for --topology), or native | dcp | dcp-1.13 | "
                  "dcp-common-pt (the same tensors in another format)")
      ->check(CLI::IsMember({"hf", "fsdp-dtensor", "native", "dcp", "dcp-1.13", "dcp-common-pt"}));
  exp->add_option("out", args->out, "output directory")->required();
  exp->add_option(
      "--spec", args->spec,
      "--to hf, fsdp-dtensor: the model's fields, a JSON spec or scenario file (layers, hidden, "
      "heads, query_groups, ffn, vocab, glu, tied, prefix), or gpt (inferred from "
      "the checkpoint; --set heads=H ...); --to hf also names (stored keys are HF names: "
      "verl's FSDP models; optimizer state and objects left out)");
  exp->add_option("--config", args->config,
                  "--spec names: the model's config.json to copy beside the shards (verl: "
                  "SRC/huggingface/config.json)");
  exp->add_option("--set", args->sets, "field=value for --spec gpt (repeatable)");
  exp->add_option("--drop", args->drops,
                  "--to hf: leave stored tensors matching GLOB (Megatron key or HF name) out on "
                  "purpose (repeatable; listed in the summary)");
  exp->add_option("--max-shard-size", args->max_shard_size, "e.g. 5GB (default), 500MB");
  exp->add_option("--dtype", args->dtype, "convert to this dtype (default: as stored)");
  exp->add_option("--topology,-t", args->topology,
                  "--to fsdp-dtensor: the ranks that hold it, dp=N[,tp=T]");
  return {exp, [args](CommandLine&) {
            ResolveRunRoot(args->checkpoint);
            if (args->spec == "gpt") args->model = InferExportModel(*args);
            return ExportCommand(*args);
          }};
}

}  // namespace distckpt
