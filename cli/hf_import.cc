// distckpt import --from hf (and export's --spec gpt, which needs the
// harness's inference): Hugging Face safetensors shards (Llama names)
// into a Megatron-layout checkpoint saved under a topology (cli/hf.h).
//
// Two steps, each bounded by what it holds: (1) every HF tensor, one at a
// time, is cut into the pieces of the Megatron tensors the export plan maps
// it from (PlanHfExport run backwards: q/k/v rows back into linear_qkv's
// interleaved groups, gate/up into SwiGLU fc1, model.layers.{i} into the
// stacked layer axis) and written as chunks of an unsharded checkpoint in
// `<out>.hf-import`; (2) every rank of the topology loads its request of the
// spec from it and saves under the topology (harness ReshardRank). Vocab
// padding rows, which HF does not store, load as zeros (the embedding's
// allow_shape_mismatch). The temporary checkpoint is removed afterwards,
// also on failure.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/hf.h"
#include "comm/thread_world.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "format/format.h"
#include "format/safetensors/safetensors.h"
#include "harness/request_spec.h"
#include "harness/verify.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

// The tensors of an HF model directory: model.safetensors.index.json's
// weight_map, or a single model.safetensors.
class HfDir {
 public:
  HfDir(Env* env, const std::string& dir) : dir_(dir) {
    const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
    std::vector<std::string> files;
    if (env->FileExists(index_path)) {
      nlohmann::json index = ParseJson(ReadFileToString(env, index_path), index_path);
      if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
        Fail(ErrorKind::kCorruption, "{}: no weight_map object", index_path);
      }
      for (const auto& [name, file] : index["weight_map"].items()) {
        if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
          Fail(ErrorKind::kCorruption, "{}: weight_map['{}'] is not a file name in {}", index_path,
               name, dir);
        }
        files.push_back(file.get<std::string>());
      }
    } else if (env->FileExists(JoinPath(dir, "model.safetensors"))) {
      files.push_back("model.safetensors");
    } else {
      Fail(ErrorKind::kIncomplete, "{}: no model.safetensors.index.json or model.safetensors", dir);
    }
    for (const std::string& f : files) {
      if (files_.count(f)) continue;
      files_[f] = std::make_unique<SafetensorsFile>(OpenSafetensors(env, JoinPath(dir, f)));
      for (const SafetensorsEntry& e : files_[f]->entries) {
        if (!by_name_.emplace(e.name, std::make_pair(files_[f].get(), &e)).second) {
          Fail(ErrorKind::kCorruption, "{}: tensor '{}' is stored twice", dir, e.name);
        }
      }
    }
  }

  bool Has(const std::string& name) const { return by_name_.count(name) != 0; }
  const std::pair<const SafetensorsFile*, const SafetensorsEntry*>& At(
      const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      Fail(ErrorKind::kKeyMismatch, "{}: the HF model has no tensor '{}'", dir_, name);
    }
    return it->second;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : by_name_) out.push_back(name);
    return out;
  }

 private:
  static bool IsPlainFileName(const std::string& f) {
    return !f.empty() && f.find('/') == std::string::npos && f != "." && f != "..";
  }
  std::string dir_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> by_name_;
};

// The Megatron tensors (stacked layers, unpadded vocab) an HF model of
// `spec` maps to; biases where the HF model has them.
std::vector<std::pair<std::string, Shape>> MegatronShapes(const GptExportSpec& s, const HfDir& hf) {
  const int64_t h = s.hidden, L = s.layers, d = s.head_dim();
  const int64_t qkv = s.query_groups * (s.heads / s.query_groups * d + 2 * d);
  const std::string l = "decoder.layers.";
  std::vector<std::pair<std::string, Shape>> out = {
      {"embedding.word_embeddings.weight", {s.vocab, h}},
      {"decoder.final_layernorm.weight", {h}},
      {l + "input_layernorm.weight", {L, h}},
      {l + "self_attention.linear_qkv.weight", {L, qkv, h}},
      {l + "self_attention.linear_proj.weight", {L, h, h}},
      {l + "pre_mlp_layernorm.weight", {L, h}},
      {l + "mlp.linear_fc1.weight", {L, (s.glu ? 2 : 1) * s.ffn, h}},
      {l + "mlp.linear_fc2.weight", {L, h, s.ffn}},
  };
  if (!s.tied) out.push_back({"output_layer.weight", {s.vocab, h}});
  const std::string p = "model.layers.0.";
  if (hf.Has(p + "self_attn.q_proj.bias")) {
    out.push_back({l + "self_attention.linear_qkv.bias", {L, qkv}});
  }
  if (hf.Has(p + "self_attn.o_proj.bias"))
    out.push_back({l + "self_attention.linear_proj.bias", {L, h}});
  if (hf.Has(p + "mlp.down_proj.bias")) out.push_back({l + "mlp.linear_fc2.bias", {L, h}});
  for (auto& [key, shape] : out) key = s.prefix + key;
  return out;
}

// Step 1: the HF tensors as chunks of one unsharded checkpoint in `tmp`.
// Returns the HF tensor names the model does not use.
std::vector<std::string> WriteUnsharded(Env* env, const GptExportSpec& spec, const HfDir& hf,
                                        const std::string& tmp) {
  std::vector<std::pair<std::string, Shape>> stored = MegatronShapes(spec, hf);
  std::map<std::string, Shape> shape_of(stored.begin(), stored.end());
  std::vector<HfTensor> plan = PlanHfExport(spec, stored);
  std::map<std::string, DType> dtype_of;  // Megatron key -> dtype of its first HF piece
  std::map<std::string, bool> used;
  for (const std::string& name : hf.Names()) used[name] = false;
  WriteWithOneWriter(env, tmp, NativeFormat(), CheckpointMetadata{}, [&](CheckpointWriter& w) {
    for (const HfTensor& t : plan) {
      const auto& [file, entry] = hf.At(t.name);
      used[t.name] = true;
      if (entry->shape != t.shape) {
        Fail(ErrorKind::kShapeMismatch, "{}: HF tensor '{}' has shape {}; the spec needs {}",
             file->path, t.name, ShapeToString(entry->shape), ShapeToString(t.shape));
      }
      Tensor buffer = Tensor::Empty(entry->dtype, t.shape);  // one HF tensor at a time
      file->ReadTensor(*entry, buffer.bytes());
      size_t offset = 0;
      for (const HfPiece& p : t.pieces) {
        auto [it, fresh] = dtype_of.emplace(p.key, entry->dtype);
        if (!fresh && it->second != entry->dtype) {
          Fail(ErrorKind::kInvalidArgument,
               "{}: HF tensor '{}' is {} but the other parts of '{}' are {}", file->path, t.name,
               DTypeName(entry->dtype), p.key, DTypeName(it->second));
        }
        const size_t n = static_cast<size_t>(Volume(p.shape)) * DTypeSize(entry->dtype);
        w.WriteTensorChunk(p.key, entry->dtype, shape_of.at(p.key), Box{p.offset, p.shape},
                           std::nullopt, buffer.bytes().subspan(offset, n));
        offset += n;
      }
    }
  });
  std::vector<std::string> unused;
  for (const auto& [name, u] : used) {
    if (!u) unused.push_back(name);
  }
  return unused;
}

}  // namespace

ImportSummary ImportFromHf(const ImportArgs& args) {
  Env* env = Env::Default();
  if (args.from != "hf") Fail(ErrorKind::kUnsupported, "import --from {}: only hf", args.from);
  const GptExportSpec spec = GptExportSpecFromFile(args.spec);
  const Topology topo = Topology::Parse(args.topology);
  const Format& format = FormatByName(args.format);
  HfDir hf(env, args.dir);
  const std::string tmp = args.out + ".hf-import";
  auto cleanup = [&] {
    env->RemoveAll(tmp);
    env->RemoveAll(tmp + ".lock");
  };
  cleanup();  // a previous import's leftover (ours by name)
  ImportSummary summary;
  try {
    summary.unused = WriteUnsharded(env, spec, hf, tmp);
    std::unique_ptr<CheckpointReader> reader = NativeFormat().OpenReader(env, tmp);
    Scenario request = LoadRequestSpec(args.spec, reader->metadata(), {});
    summary.tensors = reader->metadata().tensors.size();
    reader.reset();
    std::vector<ReshardResult> results(topo.world_size());
    RunRanks(topo.world_size(), [&](Communicator& comm) {
      results[comm.rank()] = ReshardRank(request, tmp, args.topology, args.out, format,
                                         request.strict, comm, /*objects=*/false);
    });
    summary.bytes_written = results[0].bytes_written;
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return summary;
}

nlohmann::json InferExportModel(const ExportArgs& args) {
  Env* env = Env::Default();
  std::unique_ptr<CheckpointReader> reader =
      DetectFormat(env, args.checkpoint).OpenReader(env, args.checkpoint);
  nlohmann::json model = InferGptModel(reader->metadata(), ParseSpecOverrides(args.sets));
  std::cout << "spec gpt inferred: " << model.dump() << "\n";
  return model;
}

int ImportCommand(const ImportArgs& args) {
  ImportSummary s = ImportFromHf(args);
  for (const std::string& name : s.unused) {
    std::cerr << fmt::format("warning: HF tensor '{}' has no Megatron counterpart: not imported\n",
                             name);
  }
  std::cout << fmt::format(
      "imported {} Megatron tensors from HF model {} into {} under {} ({} format): {} bytes "
      "written\n",
      s.tensors, args.dir, args.out, args.topology, args.format, s.bytes_written);
  return kExitOk;
}

}  // namespace distckpt
