#include "engine/checkpoint_diff.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/json_parse.h"
#include "engine/metadata_api.h"
#include "engine/read_state.h"
#include "format/format.h"

namespace distckpt {
namespace {

Tensor ReadWhole(CheckpointReader& reader, const std::string& key, const StoredTensor& stored) {
  Dict request{{key, Node(WholeTensorRequest(key, stored))}};
  Node loaded =
      ReadShardedState(reader, Node(std::move(request)), VerifyPolicy::kWhenWhole, nullptr);
  return loaded.at(key).as<Tensor>();
}

bool ElementsEqual(double a, double b, const DiffOptions& options) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;
  return std::fabs(a - b) <= options.atol + options.rtol * std::fabs(b);
}

// Fills `out`'s element counts and errors; returns what differs ("" when equal).
std::string CompareTensors(const Tensor& a, const Tensor& b, const DiffOptions& options,
                           KeyDiff& out) {
  out.elements = a.numel();
  const bool exact = options.atol == 0 && options.rtol == 0;
  if (exact && a.Equals(b)) return "";
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool same =
        exact ? std::memcmp(a.data() + i * DTypeSize(a.dtype()),
                            b.data() + i * DTypeSize(b.dtype()), DTypeSize(a.dtype())) == 0
              : ElementsEqual(a.At(i), b.At(i), options);
    if (same) continue;
    if (out.differing++ == 0) out.first_index = i;
    const double x = a.At(i), y = b.At(i);
    const double abs_error = std::isnan(x) != std::isnan(y)
                                 ? std::numeric_limits<double>::infinity()
                                 : (std::isnan(x) ? 0 : std::fabs(x - y));
    const double rel_error =
        y == 0 ? std::numeric_limits<double>::infinity() : abs_error / std::fabs(y);
    out.max_abs_error = std::max(out.max_abs_error, abs_error);
    out.max_rel_error = std::max(out.max_rel_error, rel_error);
  }
  if (out.differing == 0) return "";
  return fmt::format(
      "{} of {} elements differ, first at index {}: {} vs {} (max abs error {}, max rel error {})",
      out.differing, a.numel(), out.first_index, a.At(out.first_index), b.At(out.first_index),
      out.max_abs_error, out.max_rel_error);
}

bool Matches(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

// Whether one of `names` (a key and its aliases) is selected by `options`.
bool Selected(const DiffOptions& options, std::initializer_list<std::string> names) {
  bool only = options.only.empty(), excluded = false;
  for (const std::string& name : names) {
    only = only || Matches(options.only, name);
    excluded = excluded || Matches(options.exclude, name);
  }
  return only && !excluded;
}

// Records the verdict on one key; a failing one also as a mismatch line.
void Record(CheckpointDiff& diff, KeyDiff key, const std::string& verdict, std::string detail) {
  key.verdict = verdict;
  key.detail = std::move(detail);
  if (verdict == "only_a") diff.only_a.push_back(key.key);
  if (verdict == "only_b") diff.only_b.push_back(key.key);
  if (verdict != "identical" && verdict != "only_a" && verdict != "only_b") {
    diff.mismatches.push_back(
        fmt::format("{}: {}", key.kind == "common" ? "common state" : key.key, key.detail));
  }
  diff.keys.push_back(std::move(key));
}

}  // namespace

CheckpointDiff DiffCheckpoints(const std::string& a, const std::string& b,
                               const DiffOptions& options, Env* env) {
  if (!env) env = Env::Default();
  std::unique_ptr<CheckpointReader> ra = DetectFormat(env, a).OpenReader(env, a);
  std::unique_ptr<CheckpointReader> rb = DetectFormat(env, b).OpenReader(env, b);
  const CheckpointMetadata& ma = ra->metadata();
  const CheckpointMetadata& mb = rb->metadata();
  CheckpointDiff diff;
  for (const auto& [key, ta] : ma.tensors) {
    if (!Selected(options, {key})) {
      ++diff.keys_skipped;
      continue;
    }
    KeyDiff k{.key = key, .kind = "tensor"};
    auto it = mb.tensors.find(key);
    if (it == mb.tensors.end()) {
      Record(diff, k, "only_a", "");
      continue;
    }
    const StoredTensor& tb = it->second;
    if (ta.dtype != tb.dtype) {
      Record(diff, k, "dtype",
             fmt::format("dtype {} vs {}", DTypeName(ta.dtype), DTypeName(tb.dtype)));
      continue;
    }
    if (ta.global_shape != tb.global_shape) {
      Record(diff, k, "shape",
             fmt::format("global shape {} vs {}", ShapeToString(ta.global_shape),
                         ShapeToString(tb.global_shape)));
      continue;
    }
    Tensor va = ReadWhole(*ra, key, ta), vb = ReadWhole(*rb, key, tb);
    std::string why = CompareTensors(va, vb, options, k);
    ++diff.tensors_compared;
    diff.elements_compared += static_cast<uint64_t>(va.numel());
    Record(diff, k, why.empty() ? "identical" : "differs", why);
  }
  for (const auto& [key, tb] : mb.tensors) {
    if (ma.tensors.contains(key)) continue;
    if (Selected(options, {key})) {
      Record(diff, {.key = key, .kind = "tensor"}, "only_b", "");
    } else {
      ++diff.keys_skipped;
    }
  }
  for (const auto& [unique_key, oa] : ma.objects) {
    if (!Selected(options, {oa.key, unique_key})) {
      ++diff.keys_skipped;
      continue;
    }
    KeyDiff k{.key = unique_key, .kind = "object"};
    auto it = mb.objects.find(unique_key);
    if (it == mb.objects.end()) {
      Record(diff, k, "only_a", "");
      continue;
    }
    const std::string pa = ra->ReadObject(oa), pb = rb->ReadObject(it->second);
    CheckJsonDepth(pa, fmt::format("object '{}' in {}", unique_key, oa.file));
    CheckJsonDepth(pb, fmt::format("object '{}' in {}", unique_key, it->second.file));
    nlohmann::json va = nlohmann::json::parse(pa, nullptr, false);
    nlohmann::json vb = nlohmann::json::parse(pb, nullptr, false);
    ++diff.objects_compared;
    Record(diff, k, va == vb ? "identical" : "differs",
           va == vb ? "" : fmt::format("{} vs {}", va.dump(), vb.dump()));
  }
  for (const auto& [unique_key, ob] : mb.objects) {
    if (ma.objects.contains(unique_key)) continue;
    if (Selected(options, {ob.key, unique_key})) {
      Record(diff, {.key = unique_key, .kind = "object"}, "only_b", "");
    } else {
      ++diff.keys_skipped;
    }
  }
  if (!Selected(options, {"common"})) {
    ++diff.keys_skipped;
  } else {
    const bool same = ma.common == mb.common;
    Record(diff, {.key = "common", .kind = "common"}, same ? "identical" : "differs",
           same ? "" : fmt::format("{} vs {}", ma.common.dump(), mb.common.dump()));
  }
  return diff;
}

}  // namespace distckpt
