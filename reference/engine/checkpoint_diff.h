// Compares two committed checkpoints in global space, whatever their
// layouts (how tensors were sharded, which rank wrote which data file) and
// formats: the same tensor keys, each with the same dtype, global shape and
// elements; the same objects (by unique key) with equal values; the same
// common state. Tensors are read whole, one key at a time (memory: the two
// copies of the largest tensor).
//
// `only` / `exclude` select keys by glob (fnmatch: `*` also matches '/' and
// '.'): a tensor by its key, an object by its key or its unique key, the
// common state by the name "common". A key is compared when it matches some
// `only` pattern (or there is none) and no `exclude` pattern.
//
// Thread-safety: pure function of the two directories.
#ifndef DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_
#define DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "io/env.h"

namespace distckpt {

struct DiffOptions {
  // Elements a, b are equal when bitwise equal (both 0: the default), or
  // when |a - b| <= atol + rtol * |b| (NaN equals NaN).
  double atol = 0;
  double rtol = 0;
  std::vector<std::string> only{};     // glob patterns: keep keys matching any
  std::vector<std::string> exclude{};  // glob patterns: then drop keys matching any
};

// The verdict on one compared key.
struct KeyDiff {
  std::string key;   // tensor key, object unique key, or "common"
  std::string kind;  // "tensor", "object", "common"
  // "identical", "differs", "only_a", "only_b", "dtype" (dtypes differ),
  // "shape" (global shapes differ)
  std::string verdict{};
  std::string detail{};      // the mismatch line's text after "key: "
  int64_t elements = 0;      // tensor elements compared
  int64_t differing = 0;     // of them, outside the tolerance
  int64_t first_index = -1;  // row-major index of the first differing element
  double max_abs_error = 0;  // over the differing elements (NaN vs number: inf)
  double max_rel_error = 0;  // max |a - b| / |b| (|b| = 0: inf)
};

struct CheckpointDiff {
  std::vector<std::string> only_a, only_b;  // tensor keys and object unique keys
  // One line per differing key: "w: dtype f32 vs bf16", "w: 3 of 40
  // elements differ, first at index 7: 1.5 vs 2", "common state: ...".
  std::vector<std::string> mismatches;
  uint64_t tensors_compared = 0, elements_compared = 0, objects_compared = 0;
  uint64_t keys_skipped = 0;  // left out by `only` / `exclude`
  std::vector<KeyDiff> keys;  // every selected key, in comparison order
  bool identical() const { return only_a.empty() && only_b.empty() && mismatches.empty(); }
};

// Throws CheckpointError when either directory is not a committed checkpoint.
CheckpointDiff DiffCheckpoints(const std::string& a, const std::string& b,
                               const DiffOptions& options = {}, Env* env = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_
