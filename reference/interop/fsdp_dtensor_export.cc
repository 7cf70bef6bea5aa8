// distckpt export --to fsdp-dtensor: a Megatron GPT checkpoint (any layout,
// any format) rewritten as Megatron's `--ckpt-format fsdp_dtensor` saves it
// from dp x tp ranks (interop/fsdp_dtensor_export.h), one global tensor in memory at a time.
#include "interop/fsdp_dtensor_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

#include "core/error.h"
#include "engine/metadata_api.h"
#include "format/dcp/dcp_format.h"
#include "fsdp/layout.h"
#include "interop/export_source.h"
#include "interop/hf/plan.h"
#include "interop/offline_writer.h"
#include "topology/topology.h"

namespace distckpt {
namespace {

// The axis Megatron's tensor parallelism splits (-1: replicated over TP):
// column-parallel rows (embedding, qkv, fc1, output layer) or row-parallel
// columns (linear_proj, fc2 weights).
int TpDim(const std::string& name, size_t rank) {
  auto ends = [&](std::string_view s) { return name.ends_with(s); };
  if (ends("linear_proj.weight") || ends("linear_fc2.weight")) return rank >= 2 ? 1 : -1;
  if (ends("word_embeddings.weight") || ends("output_layer.weight") || ends("linear_qkv.weight") ||
      ends("linear_qkv.bias") || ends("linear_fc1.weight_w") || ends("linear_fc1.weight_v") ||
      ends("linear_fc1.bias_w") || ends("linear_fc1.bias_v") || ends("linear_fc1.weight") ||
      ends("linear_fc1.bias")) {
    return 0;
  }
  return -1;
}

// The FSDP unit of a name: its decoder layer, or -1 (the root module).
int64_t Unit(const std::string& name) {
  const std::string layers = "decoder.layers.";
  if (!name.starts_with(layers)) return -1;
  // A layer number (not one past int64: a key is the checkpoint's, not ours).
  int64_t layer = -1;
  const char* begin = name.data() + layers.size();
  const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), layer);
  return ec == std::errc() && end != begin && layer >= 0 ? layer : -1;
}

// One parameter as Megatron-FSDP shards it: one planned tensor, or the W and
// V halves of a SwiGLU fc1 (one parameter [W_t; V_t] on each TP rank).
struct Param {
  std::vector<size_t> parts;  // plan indices, concatenated along the rows
  Shape local;                // the TP-local shape of the concatenation
};

// A rank's piece of one part: rows [start, stop) of the part's TP-local rows.
struct Piece {
  int rank = 0;
  Box box;  // in the part's global coordinates
};

}  // namespace

FsdpDtensorExportSummary ExportToFsdpDtensor(const ExportArgs& args) {
  Env* env = Env::Default();
  GptExportSpec spec = args.model.is_null() ? GptExportSpecFromFile(args.spec)
                                            : GptExportSpecFromJson(args.model, "--spec gpt");
  if (args.topology.empty()) {
    Fail(ErrorKind::kInvalidArgument, "export --to fsdp-dtensor needs --topology dp=N[,tp=T]");
  }
  const Topology topo = Topology::Parse(args.topology);
  if (topo.pp != 1 || topo.cp != 1 || topo.ep != 1 || topo.vpp != 1 || topo.dp_shard != 0) {
    Fail(ErrorKind::kUnsupported,
         "export --to fsdp-dtensor: topology {} (only dp and tp: Megatron-FSDP's (dp_cp, tp) "
         "mesh without pp, cp, ep or HSDP)",
         args.topology);
  }
  const int tp = topo.tp, dp = topo.dp, world = tp * dp;

  const ExportSource opened = OpenExportSource(args.checkpoint, env);
  CheckpointReader* reader = opened.reader.get();
  const std::map<std::string, ShardedTensor>& whole = opened.tensors;
  const std::vector<std::pair<std::string, Shape>>& stored = opened.shapes;
  const std::vector<HfTensor> plan = PlanMegatronPerLayer(spec, stored);
  if (plan.empty()) {
    Fail(ErrorKind::kKeyMismatch, "export --to fsdp-dtensor: {} has no model tensors",
         args.checkpoint);
  }
  const DType model_dtype = whole.at(plan.front().pieces.front().key).dtype;
  const bool float16_module = model_dtype == DType::kBF16 || model_dtype == DType::kF16;
  const std::string opt_prefix = float16_module ? "module.module.module." : "module.module.";

  // Parameters and their TP-local shapes, grouped into FSDP units.
  std::vector<Param> params;
  std::vector<int> tp_dims(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const HfTensor& t = plan[i];
    tp_dims[i] = TpDim(t.name, t.shape.size());
    Shape local = t.shape;
    if (tp_dims[i] >= 0) {
      int64_t& axis = local[static_cast<size_t>(tp_dims[i])];
      if (axis % tp != 0) {
        Fail(ErrorKind::kShapeMismatch,
             "export --to fsdp-dtensor: '{}' has {} elements along its tensor-parallel axis {}, "
             "not divisible by tp={}",
             t.name, axis, tp_dims[i], tp);
      }
      axis /= tp;
    }
    if (local.empty()) {
      Fail(ErrorKind::kUnsupported, "export --to fsdp-dtensor: '{}' is a scalar", t.name);
    }
    if (t.name.ends_with("_v") && !params.empty() &&
        plan[params.back().parts[0]].name == t.name.substr(0, t.name.size() - 1) + "w") {
      params.back().parts.push_back(i);
      if (__builtin_add_overflow(params.back().local[0], local[0], &params.back().local[0])) {
        Fail(ErrorKind::kInvalidArgument,
             "export --to fsdp-dtensor: '{}' and its W half have more than 2^63 rows together",
             t.name);
      }
      continue;
    }
    params.push_back({{i}, local});
  }
  std::map<int64_t, std::vector<size_t>> units;  // unit -> params, in order
  for (size_t p = 0; p < params.size(); ++p) {
    units[Unit(plan[params[p].parts[0]].name)].push_back(p);
  }
  // Every part's pieces, per rank: Megatron-FSDP's rows of the parameter's
  // TP-local tensor for DP rank d, intersected with the part's rows.
  std::vector<std::vector<Piece>> pieces(plan.size());
  for (const auto& [unit, members] : units) {
    std::vector<Shape> shapes;
    for (size_t p : members) shapes.push_back(params[p].local);
    const MegatronFsdpBucket bucket = LayoutMegatronFsdpBucket(shapes, dp);
    for (size_t m = 0; m < members.size(); ++m) {
      const Param& param = params[members[m]];
      for (int d = 0; d < dp; ++d) {
        const FlatRange rows = MegatronFsdpRows(bucket, shapes, static_cast<int>(m), d);
        int64_t part_start = 0;
        for (size_t part : param.parts) {
          const HfTensor& t = plan[part];
          const int tp_dim = tp_dims[part];
          const int64_t part_rows = tp_dim == 0 ? t.shape[0] / tp : t.shape[0];
          const int64_t start = std::max(rows.start, part_start) - part_start;
          const int64_t stop = std::min(rows.stop, part_start + part_rows) - part_start;
          part_start += part_rows;
          if (stop <= start) continue;  // an empty shard writes no chunk
          for (int r = 0; r < tp; ++r) {
            if (tp_dim < 0 && r > 0) break;  // replicated over TP: TP rank 0 writes
            Box box{Shape(t.shape.size(), 0), t.shape};
            box.offset[0] = start;
            box.shape[0] = stop - start;
            if (tp_dim >= 0) {
              const size_t a = static_cast<size_t>(tp_dim);
              const int64_t per = t.shape[a] / tp;
              box.offset[a] += r * per;
              if (a != 0) box.shape[a] = per;
            }
            pieces[part].push_back({d * tp + r, std::move(box)});
          }
        }
      }
    }
  }

  // What to write: each planned tensor as the model's fp32 main weight and
  // its Adam moments, under Megatron's keys.
  struct Output {
    std::string key;
    size_t part;
    std::string state;  // optimizer.state.<state>.<key> of the source; "" = the model key
  };
  auto has_state = [&](const HfTensor& t, const std::string& state) {
    return std::all_of(t.pieces.begin(), t.pieces.end(), [&](const HfPiece& p) {
      return whole.contains(fmt::format("optimizer.state.{}.{}", state, p.key));
    });
  };
  std::vector<Output> outputs;
  FsdpDtensorExportSummary summary;
  summary.ranks = world;
  for (size_t i = 0; i < plan.size(); ++i) {
    const HfTensor& t = plan[i];
    outputs.push_back(
        {"model.module." + t.name, i, has_state(t, "fp32_param") ? "fp32_param" : ""});
    ++summary.model_tensors;
    for (const char* state : {"exp_avg", "exp_avg_sq"}) {
      if (!has_state(t, state)) continue;
      outputs.push_back(
          {fmt::format("optimizer.state.{}{}.{}", opt_prefix, t.name, state), i, state});
      ++summary.optimizer_tensors;
    }
  }

  CheckpointMetadata like;
  like.topology = topo.ToString();
  like.common = reader->metadata().common;
  if (!like.common.is_object()) like.common = nlohmann::json::object();
  if (!like.common.contains("checkpoint_version")) like.common["checkpoint_version"] = 3.0;
  if (!like.common.contains("iteration")) like.common["iteration"] = 0;
  summary.objects_dropped = reader->metadata().objects.size();
  summary.bytes_written = WriteWithRankWriters(
      env, args.out, FsdpDtensorFormat(), like, world,
      [&](std::vector<std::unique_ptr<CheckpointWriter>>& writers) {
        for (const Output& out : outputs) {
          HfTensor source = plan[out.part];
          for (HfPiece& p : source.pieces) {
            if (!out.state.empty()) p.key = fmt::format("optimizer.state.{}.{}", out.state, p.key);
          }
          // The one global tensor held at a time, in float32.
          const Tensor full = ReadPieces(*reader, whole, source, DType::kF32);
          const Box global{Shape(source.shape.size(), 0), source.shape};
          for (const Piece& piece : pieces[out.part]) {
            std::vector<std::byte> chunk(static_cast<size_t>(Volume(piece.box.shape)) * 4);
            ForEachCopyRun(
                global, std::nullopt, piece.box, std::nullopt, piece.box, [&](const CopyRun& run) {
                  std::memcpy(chunk.data() + run.b_index * 4, full.data() + run.a_index * 4,
                              static_cast<size_t>(run.count) * 4);
                });
            writers[static_cast<size_t>(piece.rank)]->WriteTensorChunk(
                out.key, DType::kF32, source.shape, piece.box, std::nullopt, chunk);
            ++summary.chunks;
          }
        }
      });
  return summary;
}

}  // namespace distckpt
