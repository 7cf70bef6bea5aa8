// Exact or refused: where each stored model byte goes in an export.
//
// AccountExport checks a plan against the checkpoint's tensors: every
// stored model tensor (a key under the model's prefix, not "optimizer.")
// must be covered exactly once by the plan's pieces, except for the vocab
// padding rows the plan leaves out of embedding / output layer (rows past
// the vocab) and tensors the user leaves out with --drop GLOB (matched
// against the stored key and against the HF name: an HF tensor any of whose
// pieces or whose name matches is left out of the plan). Optimizer state is
// counted as skipped. What is left over, or covered twice, is returned in
// `unplaced` (one line per tensor, naming it); the export refuses then.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_INTEROP_HF_ACCOUNTING_H_
#define DISTCKPT_INTEROP_HF_ACCOUNTING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/box.h"
#include "core/dtype.h"
#include "interop/export_source.h"

namespace distckpt {

struct StoredInfo {
  std::string key;
  Shape shape;
  DType dtype;
};

struct ExportAccount {
  size_t model_tensors = 0;  // stored model tensors
  uint64_t model_bytes = 0, exported_bytes = 0, padding_bytes = 0, dropped_bytes = 0;
  size_t optimizer_tensors = 0;
  std::vector<std::string> dropped;   // stored keys left out (--drop)
  std::vector<std::string> padding;   // "KEY: rows A..B" vocab padding left out
  std::vector<std::string> unplaced;  // "KEY: why" (nothing of it, or part of it, placed)
};

// `*plan` loses the HF tensors --drop removes. `prefix`: the model's.
ExportAccount AccountExport(std::vector<HfTensor>* plan, const std::vector<StoredInfo>& stored,
                            const std::string& prefix, const std::vector<std::string>& drops);

// Shell-style glob: '*' any run of characters (dots included), '?' one.
bool GlobMatch(std::string_view pattern, std::string_view text);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_HF_ACCOUNTING_H_
