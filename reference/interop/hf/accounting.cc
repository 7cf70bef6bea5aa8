// Where each stored model byte goes (interop/hf/accounting.h).
#include "interop/hf/accounting.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace distckpt {
namespace {

bool Overlap(const HfPiece& a, const HfPiece& b) {
  for (size_t d = 0; d < a.offset.size(); ++d) {
    if (a.offset[d] + a.shape[d] <= b.offset[d] || b.offset[d] + b.shape[d] <= a.offset[d])
      return false;
  }
  return true;
}

}  // namespace

bool GlobMatch(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

ExportAccount AccountExport(std::vector<HfTensor>* plan, const std::vector<StoredInfo>& stored,
                            const std::string& prefix, const std::vector<std::string>& drops) {
  auto dropped = [&](std::string_view name) {
    return std::any_of(drops.begin(), drops.end(),
                       [&](const std::string& g) { return GlobMatch(g, name); });
  };
  ExportAccount account;
  std::set<std::string> dropped_keys;
  for (const StoredInfo& s : stored) {
    if (s.key.starts_with("optimizer.") || s.key.starts_with(prefix + "optimizer.")) continue;
    if (dropped(s.key) || (s.key.starts_with(prefix) && dropped(s.key.substr(prefix.size()))))
      dropped_keys.insert(s.key);
  }
  // HF tensors left out: by name, or made of a dropped key.
  std::vector<HfTensor> kept;
  for (HfTensor& t : *plan) {
    bool out = dropped(t.name);
    for (const HfPiece& p : t.pieces) out = out || dropped_keys.count(p.key) > 0;
    if (out) {
      for (const HfPiece& p : t.pieces) dropped_keys.insert(p.key);
    } else {
      kept.push_back(std::move(t));
    }
  }
  *plan = std::move(kept);
  std::map<std::string, std::vector<const HfPiece*>> pieces;
  for (const HfTensor& t : *plan) {
    for (const HfPiece& p : t.pieces) pieces[p.key].push_back(&p);
  }
  for (const StoredInfo& s : stored) {
    if (s.key.starts_with("optimizer.") || s.key.starts_with(prefix + "optimizer.")) {
      ++account.optimizer_tensors;
      continue;
    }
    const uint64_t elem = DTypeSize(s.dtype);
    const uint64_t bytes = static_cast<uint64_t>(Volume(s.shape)) * elem;
    ++account.model_tensors;
    account.model_bytes += bytes;
    if (dropped_keys.count(s.key)) {
      account.dropped.push_back(s.key);
      account.dropped_bytes += bytes;
      continue;
    }
    auto it = pieces.find(s.key);
    if (it == pieces.end()) {
      account.unplaced.push_back(
          fmt::format("{} {}: no HF tensor holds it", s.key, ShapeToString(s.shape)));
      continue;
    }
    const std::vector<const HfPiece*>& ps = it->second;
    uint64_t covered = 0;
    bool twice = false;
    for (size_t a = 0; a < ps.size(); ++a) {
      covered += static_cast<uint64_t>(Volume(ps[a]->shape));
      for (size_t b = a + 1; b < ps.size() && !twice; ++b) twice = Overlap(*ps[a], *ps[b]);
    }
    if (twice) {
      account.unplaced.push_back(fmt::format("{}: placed twice", s.key));
      continue;
    }
    const uint64_t total = static_cast<uint64_t>(Volume(s.shape));
    account.exported_bytes += covered * elem;
    if (covered == total) continue;
    // Vocab padding: embedding / output rows past the vocab, every column.
    const bool vocab_table = s.key == prefix + "embedding.word_embeddings.weight" ||
                             s.key == prefix + "output_layer.weight";
    int64_t rows_covered = 0;
    bool prefix_rows = vocab_table && s.shape.size() == 2;
    for (const HfPiece* p : ps) {
      prefix_rows =
          prefix_rows && p->offset[0] == 0 && p->offset[1] == 0 && p->shape[1] == s.shape[1];
      rows_covered = std::max(rows_covered, p->shape[0]);
    }
    if (prefix_rows && ps.size() == 1) {
      account.padding_bytes += (total - covered) * elem;
      account.padding.push_back(
          fmt::format("{}: rows {}..{} (vocab padding)", s.key, rows_covered, s.shape[0] - 1));
      continue;
    }
    account.unplaced.push_back(fmt::format("{} {}: {} of {} elements placed", s.key,
                                           ShapeToString(s.shape), covered, total));
  }
  return account;
}

}  // namespace distckpt
