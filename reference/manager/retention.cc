#include "manager/retention.h"

#include <set>

#include "core/error.h"

namespace distckpt {

std::vector<int64_t> SupersededIterations(const RetentionPolicy& policy,
                                          const std::vector<int64_t>& complete, int64_t committed) {
  if (policy.keep_last < 0 || policy.retain_interval < 0) {
    Fail(ErrorKind::kInvalidArgument, "retention: keep_last {} and retain_interval {} must be >= 0",
         policy.keep_last, policy.retain_interval);
  }
  if (policy.keep_last == 0 && policy.retain_interval == 0) return {};
  std::vector<int64_t> candidates;  // superseded or the committed one
  for (int64_t it : complete) {
    if (it < committed) candidates.push_back(it);
  }
  candidates.push_back(committed);  // complete by definition: it counts toward keep_last
  std::set<int64_t> keep{committed};
  const size_t last = policy.keep_last > 0 ? static_cast<size_t>(policy.keep_last) : 1;
  for (size_t i = 0; i < candidates.size() && i < last; ++i) {
    keep.insert(candidates[candidates.size() - 1 - i]);
  }
  std::vector<int64_t> doomed;
  for (int64_t it : candidates) {
    if (keep.count(it)) continue;
    if (policy.retain_interval > 0 && it % policy.retain_interval == 0) continue;
    doomed.push_back(it);
  }
  return doomed;
}

}  // namespace distckpt
