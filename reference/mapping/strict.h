// StrictHandling (docs/megatron-semantics.md §2.3): what a load does with keys the
// request has but the checkpoint lacks ("unexpected", per rank) and keys the
// checkpoint has but no rank requests ("missing", global).
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_MAPPING_STRICT_H_
#define DISTCKPT_MAPPING_STRICT_H_

#include <set>
#include <string>
#include <string_view>

#include "mapping/state_dict.h"

namespace distckpt {

enum class StrictHandling {
  kAssumeOkUnexpected,  // "assume_ok_unexpected" (default)
  kLogUnexpected,       // "log_unexpected"
  kLogAll,              // "log_all"
  kRaiseUnexpected,     // "raise_unexpected"
  kRaiseAll,            // "raise_all"
  kReturnUnexpected,    // "return_unexpected"
  kReturnAll,           // "return_all"
  kIgnoreAll,           // "ignore_all"
};

// Throws CheckpointError(kInvalidArgument) "Invalid strict flag: <x>".
StrictHandling ParseStrictHandling(std::string_view name);
std::string_view StrictHandlingName(StrictHandling strict);
bool RequiresExplicitCkptMismatchCheck(StrictHandling strict);
bool RequiresGlobalAppMetadata(StrictHandling strict);
bool RequiresReturningMismatchKeys(StrictHandling strict);

struct KeyMismatch {
  std::set<std::string> missing;     // in checkpoint, requested by no rank
  std::set<std::string> unexpected;  // requested by this rank, not in checkpoint
};

// Megatron's report text; empty when both sets are empty.
std::string MismatchReport(const KeyMismatch& mismatch);

// Applies `strict` to this rank's sharded request (keys = ShardedBase keys):
// computes the sets (missing only when the mode needs global keys), removes
// unexpected keys from `sharded` in place, clears the sets for ignore_all,
// throws CheckpointError(kKeyMismatch) with MismatchReport for raise_*, and
// appends the report to `log` for log_*. Returns the sets (empty for modes
// that do not return them, as Megatron does).
KeyMismatch ApplyStrictHandling(StrictHandling strict, Node& sharded,
                                const std::set<std::string>& checkpoint_keys,
                                const std::set<std::string>& all_ranks_requested_keys,
                                std::string* log);

}  // namespace distckpt

#endif  // DISTCKPT_MAPPING_STRICT_H_
