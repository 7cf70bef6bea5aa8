// A checkpoint opened for an export, and the plan an export follows: each
// output tensor as the ordered pieces (boxes) of stored tensors it is made
// of. Used by the HF export (interop/hf/), export --to fsdp-dtensor and
// the HF import (which runs an export plan backwards).
//
// Memory: ReadPieces holds one output tensor (the caller's buffer).
// Errors: CheckpointError naming the key or file.
// Thread-safety: pure functions, except that ReadPieces reads through
// `reader` (one thread at a time per reader).
#ifndef DISTCKPT_INTEROP_EXPORT_SOURCE_H_
#define DISTCKPT_INTEROP_EXPORT_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "format/format.h"
#include "io/env.h"
#include "mapping/sharded_tensor.h"

namespace distckpt {

// One piece of an output tensor: `shape` elements of stored tensor `key` at
// `offset` (global coordinates; the pieces of a tensor, in order, are its
// row-major bytes).
struct HfPiece {
  std::string key;
  Shape offset, shape;
};
// An output tensor (an HF tensor, or a per-layer Megatron tensor). With
// `transpose` (GPT-2's Conv1D), the 2-D concatenation of the pieces is
// written transposed: `shape` is the output's shape, [cols, rows].
struct HfTensor {
  std::string name;
  Shape shape;
  std::vector<HfPiece> pieces;
  bool transpose = false;
};

// A checkpoint opened for export: its reader and its tensors' metadata
// (LoadTensorsMetadata), by key for ReadPieces and as (key, global shape) in
// key order for the plans.
struct ExportSource {
  std::unique_ptr<CheckpointReader> reader;
  std::map<std::string, ShardedTensor> tensors;
  std::vector<std::pair<std::string, Shape>> shapes;
};
ExportSource OpenExportSource(const std::string& checkpoint, Env* env);

// The output tensor `t` (its pieces, in order; transposed when asked) read
// from `reader` in `dtype`. `stored`: the checkpoint's tensors
// (LoadTensorsMetadata) by key.
Tensor ReadPieces(CheckpointReader& reader, const std::map<std::string, ShardedTensor>& stored,
                  const HfTensor& t, DType dtype);

// export --spec names: every stored tensor but the optimizer's ("optimizer."
// keys) under its own key, whole, in key order (verl's FSDP checkpoints hold
// a Hugging Face model's state dict, so its keys are already HF names).
std::vector<HfTensor> PlanVerbatimExport(const std::vector<std::pair<std::string, Shape>>& stored);

// `t` ([rows, cols]) transposed into a new [cols, rows] tensor.
Tensor TransposeRows(const Tensor& t);

// Parses "5GB", "500MB", "100KB", "123" (bytes; decimal units as HF's).
uint64_t ParseByteSize(const std::string& text);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_EXPORT_SOURCE_H_
