// StrictHandling: names, predicates and the mismatch handling of
// docs/megatron-semantics.md §2.3 (validate_integrity_and_strict_load, step 1).
#include "mapping/strict.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "mapping/dict_utils.h"
#include "mapping/py_format.h"

namespace distckpt {

namespace {

constexpr std::array<std::pair<StrictHandling, std::string_view>, 8> kNames = {{
    {StrictHandling::kAssumeOkUnexpected, "assume_ok_unexpected"},
    {StrictHandling::kLogUnexpected, "log_unexpected"},
    {StrictHandling::kLogAll, "log_all"},
    {StrictHandling::kRaiseUnexpected, "raise_unexpected"},
    {StrictHandling::kRaiseAll, "raise_all"},
    {StrictHandling::kReturnUnexpected, "return_unexpected"},
    {StrictHandling::kReturnAll, "return_all"},
    {StrictHandling::kIgnoreAll, "ignore_all"},
}};

const std::string* ShardedKey(const Node& leaf) {
  if (const ShardedTensor* t = leaf.get_if<ShardedTensor>()) return &t->key;
  if (const ShardedObject* o = leaf.get_if<ShardedObject>()) return &o->key;
  return nullptr;
}

}  // namespace

StrictHandling ParseStrictHandling(std::string_view name) {
  for (const auto& [value, text] : kNames) {
    if (text == name) return value;
  }
  std::vector<std::string_view> valid;
  for (const auto& [value, text] : kNames) valid.push_back(text);
  Fail(ErrorKind::kInvalidArgument,
       "Invalid strict flag: {} is not a valid StrictHandling (one of {})", PyRepr(name),
       fmt::join(valid, ", "));
}

std::string_view StrictHandlingName(StrictHandling strict) {
  for (const auto& [value, text] : kNames) {
    if (value == strict) return text;
  }
  return "unknown";
}

bool RequiresExplicitCkptMismatchCheck(StrictHandling strict) {
  return strict != StrictHandling::kAssumeOkUnexpected;
}

bool RequiresGlobalAppMetadata(StrictHandling strict) {
  return strict == StrictHandling::kIgnoreAll || strict == StrictHandling::kRaiseAll ||
         strict == StrictHandling::kReturnAll || strict == StrictHandling::kLogAll;
}

bool RequiresReturningMismatchKeys(StrictHandling strict) {
  return strict == StrictHandling::kReturnUnexpected || strict == StrictHandling::kReturnAll;
}

std::string MismatchReport(const KeyMismatch& mismatch) {
  if (mismatch.missing.empty() && mismatch.unexpected.empty()) return "";
  std::string report;
  if (!mismatch.missing.empty()) {
    report += "Some keys found in the checkpoint are missing in the provided sharded state dict. ";
  }
  if (!mismatch.unexpected.empty()) {
    report +=
        "Unexpected keys (not found in the checkpoint) encountered in the provided sharded state "
        "dict. ";
  }
  report += "\n";
  if (!mismatch.missing.empty()) {
    report += fmt::format("Missing keys (for all ranks): {}. ", PyStrSet(mismatch.missing));
  }
  if (!mismatch.unexpected.empty()) {
    report += fmt::format("Unexpected keys (for this rank): {}. ", PyStrSet(mismatch.unexpected));
  }
  return report;
}

KeyMismatch ApplyStrictHandling(StrictHandling strict, Node& sharded,
                                const std::set<std::string>& checkpoint_keys,
                                const std::set<std::string>& all_ranks_requested_keys,
                                std::string* log) {
  if (!RequiresExplicitCkptMismatchCheck(strict)) return {};
  KeyMismatch mismatch;
  ForEachLeaf(sharded, [&](const NodePath&, const Node& leaf) {
    const std::string* key = ShardedKey(leaf);
    if (key != nullptr && !checkpoint_keys.count(*key)) mismatch.unexpected.insert(*key);
  });
  // The *_unexpected modes do not exchange global metadata, so they never
  // see missing keys.
  if (RequiresGlobalAppMetadata(strict)) {
    std::set_difference(checkpoint_keys.begin(), checkpoint_keys.end(),
                        all_ranks_requested_keys.begin(), all_ranks_requested_keys.end(),
                        std::inserter(mismatch.missing, mismatch.missing.end()));
  }
  const bool any = !mismatch.missing.empty() || !mismatch.unexpected.empty();
  // Megatron removes the unexpected keys first; raising first leaves the
  // caller's request untouched when it throws.
  if ((strict == StrictHandling::kRaiseUnexpected || strict == StrictHandling::kRaiseAll) && any) {
    Fail(ErrorKind::kKeyMismatch, "{}", MismatchReport(mismatch));
  }
  if (!mismatch.unexpected.empty()) {  // Megatron's _adjust_non_strict_load
    sharded = ExtractMatching(sharded, [&](const Node& leaf) {
                const std::string* key = ShardedKey(leaf);
                return key != nullptr && mismatch.unexpected.count(*key) > 0;
              }).second;
  }
  if ((strict == StrictHandling::kLogUnexpected || strict == StrictHandling::kLogAll) && any &&
      log != nullptr) {
    *log += MismatchReport(mismatch) + "\n";
  }
  return RequiresReturningMismatchKeys(strict) ? mismatch : KeyMismatch{};
}

}  // namespace distckpt
