// Reading a checkpoint's tensors for an export (interop/export_source.h).
#include "interop/export_source.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>

#include "core/error.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"

namespace distckpt {

std::vector<HfTensor> PlanVerbatimExport(const std::vector<std::pair<std::string, Shape>>& stored) {
  std::vector<HfTensor> plan;
  for (const auto& [key, shape] : stored) {
    if (key.starts_with("optimizer.")) continue;
    plan.push_back({key, shape, {{key, Shape(shape.size(), 0), shape}}});
  }
  if (plan.empty()) {
    Fail(ErrorKind::kKeyMismatch, "export --spec names: the checkpoint holds no model tensor");
  }
  return plan;
}

ExportSource OpenExportSource(const std::string& checkpoint, Env* env) {
  ExportSource source;
  source.reader = DetectFormat(env, checkpoint).OpenReader(env, checkpoint);
  Node meta = LoadTensorsMetadata(checkpoint, env);
  for (auto& [key, node] : meta.as<Dict>()) {
    ShardedTensor& t = node.as<ShardedTensor>();
    source.shapes.emplace_back(key, t.global_shape);
    source.tensors.emplace(key, std::move(t));
  }
  return source;
}

Tensor ReadPieces(CheckpointReader& reader, const std::map<std::string, ShardedTensor>& stored,
                  const HfTensor& t, DType dtype) {
  // Before a buffer of the size the metadata claims: the files hold it.
  for (const HfPiece& p : t.pieces) CheckTensorStored(reader, reader.metadata().tensors.at(p.key));
  Tensor buffer = Tensor::Empty(dtype, t.shape);
  size_t offset = 0;
  for (const HfPiece& p : t.pieces) {
    ShardedTensor request = stored.at(p.key);
    request.dtype = dtype;
    request.local_shape = p.shape;
    request.global_offset = p.offset;
    request.axis_fragmentations.reset();
    request.flattened_range.reset();
    request.prepend_axis_num = 0;
    // Read straight into the tensor's buffer (no second copy).
    request.data = Tensor::Wrap(buffer.data() + offset, dtype, p.shape);
    Node loaded = ReadShardedState(reader, Node(Dict{{"t", Node(request)}}),
                                   VerifyPolicy::kWhenWhole, nullptr, 1);
    const Tensor& got = loaded.at("t").as<Tensor>();
    if (got.data() != buffer.data() + offset) {
      std::copy(got.data(), got.data() + got.nbytes(), buffer.data() + offset);
    }
    offset += got.nbytes();
  }
  if (!t.transpose) return buffer;
  // GPT-2's Conv1D: the [rows, cols] concatenation written as [cols, rows].
  return TransposeRows(Tensor::Wrap(buffer.data(), dtype, {t.shape.at(1), t.shape.at(0)}));
}

Tensor TransposeRows(const Tensor& t) {
  const int64_t rows = t.shape().at(0), cols = t.shape().at(1);
  const size_t e = DTypeSize(t.dtype());
  Tensor out = Tensor::Empty(t.dtype(), {cols, rows});
  const std::byte* in = t.data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(out.data() + (c * rows + r) * e, in + (r * cols + c) * e, e);
    }
  }
  return out;
}
uint64_t ParseByteSize(const std::string& text) {
  // Decimal digits, then a unit: no sign ("-1" is not 2^64 - 1), no spaces.
  uint64_t value = 0;
  const auto [digits_end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || text.empty() || text[0] < '0' || text[0] > '9') {
    Fail(ErrorKind::kInvalidArgument, "--max-shard-size: bad size '{}' (e.g. 5GB, 500MB, 1000)",
         text);
  }
  const size_t end = static_cast<size_t>(digits_end - text.data());
  std::string unit = text.substr(end);
  const std::map<std::string, uint64_t> units = {
      {"", 1},          {"B", 1},         {"KB", 1000},       {"MB", 1000000}, {"GB", 1000000000},
      {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1ull << 30}};
  auto it = units.find(unit);
  if (it == units.end() || value == 0 ||
      value > std::numeric_limits<uint64_t>::max() / it->second) {
    Fail(ErrorKind::kInvalidArgument, "--max-shard-size: bad size '{}' (e.g. 5GB, 500MB, 1000)",
         text);
  }
  return value * it->second;
}

}  // namespace distckpt
