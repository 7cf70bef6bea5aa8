// Which committed checkpoints a save supersedes: verl's max_ckpt_to_keep
// (keep_last) and Megatron's --save-retain-interval.
//
// Given the complete iterations on disk and the iteration just committed
// (the tracker's), keeps: the newest `keep_last` complete iterations at or
// below it (0 = all), every multiple of `retain_interval` (0 = none; with
// keep_last 0 and an interval, only the newest and the multiples are kept,
// as Megatron does), the committed iteration itself, and everything newer
// than it (not superseded). The rest are returned for deletion.
//
// Thread-safety: pure function.
#ifndef DISTCKPT_MANAGER_RETENTION_H_
#define DISTCKPT_MANAGER_RETENTION_H_

#include <cstdint>
#include <vector>

namespace distckpt {

struct RetentionPolicy {
  int keep_last = 0;            // 0 = keep every checkpoint
  int64_t retain_interval = 0;  // 0 = no interval
};

// `complete`: ascending. Returns ascending iterations to delete.
std::vector<int64_t> SupersededIterations(const RetentionPolicy& policy,
                                          const std::vector<int64_t>& complete, int64_t committed);

}  // namespace distckpt

#endif  // DISTCKPT_MANAGER_RETENTION_H_
