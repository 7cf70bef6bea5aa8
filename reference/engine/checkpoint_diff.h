// Compares two committed checkpoints in global space, whatever their
// layouts (how tensors were sharded, which rank wrote which data file) and
// formats: the same tensor keys, each with the same dtype, global shape and
// elements; the same objects (by unique key) with equal values; the same
// common state. Tensors are read whole, one key at a time.
//
// Thread-safety: pure function of the two directories.
#ifndef DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_
#define DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_

#include <string>
#include <vector>

#include "io/env.h"

namespace distckpt {

struct DiffOptions {
  // Elements a, b are equal when bitwise equal (both 0: the default), or
  // when |a - b| <= atol + rtol * |b| (NaN equals NaN).
  double atol = 0;
  double rtol = 0;
};

struct CheckpointDiff {
  std::vector<std::string> only_a, only_b;  // tensor keys and object unique keys
  // One line per differing key: "w: dtype f32 vs bf16", "w: 3 of 40
  // elements differ, first at index 7: 1.5 vs 2", "common state: ...".
  std::vector<std::string> mismatches;
  uint64_t tensors_compared = 0, elements_compared = 0, objects_compared = 0;
  bool identical() const { return only_a.empty() && only_b.empty() && mismatches.empty(); }
};

// Throws CheckpointError when either directory is not a committed checkpoint.
CheckpointDiff DiffCheckpoints(const std::string& a, const std::string& b,
                               const DiffOptions& options = {}, Env* env = nullptr);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_CHECKPOINT_DIFF_H_
