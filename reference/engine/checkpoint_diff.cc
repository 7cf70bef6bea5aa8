#include "engine/checkpoint_diff.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

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

// "" when equal, else what differs.
std::string CompareTensors(const Tensor& a, const Tensor& b, const DiffOptions& options) {
  const bool exact = options.atol == 0 && options.rtol == 0;
  if (exact && a.Equals(b)) return "";
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const bool same =
        exact ? std::memcmp(a.data() + i * DTypeSize(a.dtype()),
                            b.data() + i * DTypeSize(b.dtype()), DTypeSize(a.dtype())) == 0
              : ElementsEqual(a.At(i), b.At(i), options);
    if (same) continue;
    if (differ++ == 0) first = i;
  }
  if (differ == 0) return "";
  return fmt::format("{} of {} elements differ, first at index {}: {} vs {}", differ, a.numel(),
                     first, a.At(first), b.At(first));
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
    auto it = mb.tensors.find(key);
    if (it == mb.tensors.end()) {
      diff.only_a.push_back(key);
      continue;
    }
    const StoredTensor& tb = it->second;
    if (ta.dtype != tb.dtype) {
      diff.mismatches.push_back(
          fmt::format("{}: dtype {} vs {}", key, DTypeName(ta.dtype), DTypeName(tb.dtype)));
      continue;
    }
    if (ta.global_shape != tb.global_shape) {
      diff.mismatches.push_back(fmt::format("{}: global shape {} vs {}", key,
                                            ShapeToString(ta.global_shape),
                                            ShapeToString(tb.global_shape)));
      continue;
    }
    Tensor va = ReadWhole(*ra, key, ta), vb = ReadWhole(*rb, key, tb);
    if (std::string why = CompareTensors(va, vb, options); !why.empty()) {
      diff.mismatches.push_back(fmt::format("{}: {}", key, why));
    }
    ++diff.tensors_compared;
    diff.elements_compared += static_cast<uint64_t>(va.numel());
  }
  for (const auto& [key, tb] : mb.tensors) {
    if (!ma.tensors.contains(key)) diff.only_b.push_back(key);
  }
  for (const auto& [unique_key, oa] : ma.objects) {
    auto it = mb.objects.find(unique_key);
    if (it == mb.objects.end()) {
      diff.only_a.push_back(unique_key);
      continue;
    }
    nlohmann::json va = nlohmann::json::parse(ra->ReadObject(oa), nullptr, false);
    nlohmann::json vb = nlohmann::json::parse(rb->ReadObject(it->second), nullptr, false);
    if (va != vb)
      diff.mismatches.push_back(fmt::format("{}: {} vs {}", unique_key, va.dump(), vb.dump()));
    ++diff.objects_compared;
  }
  for (const auto& [unique_key, ob] : mb.objects) {
    if (!ma.objects.contains(unique_key)) diff.only_b.push_back(unique_key);
  }
  if (ma.common != mb.common) {
    diff.mismatches.push_back(
        fmt::format("common state: {} vs {}", ma.common.dump(), mb.common.dump()));
  }
  return diff;
}

}  // namespace distckpt
