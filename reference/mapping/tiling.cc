// Exact-tiling check by sweeping along one axis (see tiling.h).
#include "mapping/tiling.h"

#include <algorithm>

namespace distckpt {

namespace {

struct Piece {
  Box box;       // clipped to the global box, non-empty
  size_t index;  // into the caller's boxes
};

int64_t End(const Box& b, size_t axis) { return b.offset[axis] + b.shape[axis]; }

// Volume of the box's cross-section orthogonal to `axis`.
int64_t CrossVolume(const Box& b, size_t axis) {
  int64_t v = 1;
  for (size_t a = 0; a < b.rank(); ++a) {
    if (a != axis) v *= b.shape[a];
  }
  return v;
}

bool OverlapOffAxis(const Box& a, const Box& b, size_t axis) {
  for (size_t d = 0; d < a.rank(); ++d) {
    if (d == axis) continue;
    if (std::max(a.offset[d], b.offset[d]) >= std::min(End(a, d), End(b, d))) return false;
  }
  return true;
}

// How many comparisons a sweep along `axis` makes: for every piece, the
// pieces whose interval on `axis` contains its start.
int64_t SweepCost(const std::vector<Piece>& pieces, size_t axis) {
  std::vector<int64_t> starts, ends;
  for (const Piece& p : pieces) {
    starts.push_back(p.box.offset[axis]);
    ends.push_back(End(p.box, axis));
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  int64_t cost = 0;
  for (const Piece& p : pieces) {
    const int64_t s = p.box.offset[axis];
    cost += (std::upper_bound(starts.begin(), starts.end(), s) - starts.begin()) -
            (std::upper_bound(ends.begin(), ends.end(), s) - ends.begin()) - 1;
  }
  return cost;
}

std::vector<std::pair<size_t, size_t>> FindOverlaps(const std::vector<Piece>& pieces, size_t rank,
                                                    size_t max_examples) {
  std::vector<std::pair<size_t, size_t>> overlaps;
  if (rank == 0) {  // every 0-d piece is the whole (scalar) tensor
    for (size_t i = 1; i < pieces.size() && overlaps.size() < max_examples; ++i) {
      overlaps.emplace_back(pieces[0].index, pieces[i].index);
    }
    return overlaps;
  }
  size_t axis = 0;
  int64_t best = -1;
  for (size_t a = 0; a < rank; ++a) {
    const int64_t cost = SweepCost(pieces, a);
    if (best < 0 || cost < best) {
      best = cost;
      axis = a;
    }
  }
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return pieces[x].box.offset[axis] < pieces[y].box.offset[axis];
  });
  std::vector<size_t> active;
  for (size_t i : order) {
    const Box& box = pieces[i].box;
    const int64_t start = box.offset[axis];
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t j) { return End(pieces[j].box, axis) <= start; }),
                 active.end());
    for (size_t j : active) {
      if (OverlapOffAxis(pieces[j].box, box, axis)) {
        overlaps.emplace_back(pieces[j].index, pieces[i].index);
        if (overlaps.size() >= max_examples) return overlaps;
      }
    }
    active.push_back(i);
  }
  return overlaps;
}

// An uncovered box inside `region`, given disjoint boxes inside it whose
// cross-sections are complete along axes before `axis`: sweep `axis` for the
// first slab whose open boxes do not fill the cross-section, recurse into it.
std::optional<Box> FindGap(const Box& region, std::vector<Box> boxes, size_t axis) {
  if (axis == region.rank()) return boxes.empty() ? std::optional<Box>(region) : std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> events;  // (coordinate, cross-volume delta)
  for (const Box& b : boxes) {
    events.emplace_back(b.offset[axis], CrossVolume(b, axis));
    events.emplace_back(End(b, axis), -CrossVolume(b, axis));
  }
  std::sort(events.begin(), events.end());
  const int64_t full = CrossVolume(region, axis);
  int64_t prev = region.offset[axis];
  int64_t sum = 0;
  std::optional<std::pair<int64_t, int64_t>> slab;
  for (size_t i = 0; i < events.size() && !slab;) {
    const int64_t x = events[i].first;
    if (x > prev && sum < full) {
      slab.emplace(prev, x);
      break;
    }
    for (; i < events.size() && events[i].first == x; ++i) sum += events[i].second;
    prev = std::max(prev, x);
  }
  if (!slab && End(region, axis) > prev && sum < full) slab.emplace(prev, End(region, axis));
  if (!slab) return std::nullopt;

  Box sub = region;
  sub.offset[axis] = slab->first;
  sub.shape[axis] = slab->second - slab->first;
  std::vector<Box> open;
  for (Box& b : boxes) {
    if (b.offset[axis] <= slab->first && End(b, axis) >= slab->second) {
      b.offset[axis] = sub.offset[axis];
      b.shape[axis] = sub.shape[axis];
      open.push_back(std::move(b));
    }
  }
  return FindGap(sub, std::move(open), axis + 1);
}

}  // namespace

TilingCheck CheckTiling(const Shape& global_shape, const std::vector<Box>& boxes,
                        size_t max_examples) {
  TilingCheck check;
  const Box global{Shape(global_shape.size(), 0), global_shape};
  std::vector<Piece> pieces;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (boxes[i].empty()) continue;
    if (!Contains(global, boxes[i]) && check.outside.size() < max_examples) {
      check.outside.push_back(i);
    }
    if (std::optional<Box> clipped = Intersect(global, boxes[i])) pieces.push_back({*clipped, i});
  }
  check.overlaps = FindOverlaps(pieces, global_shape.size(), max_examples);
  if (!check.overlaps.empty()) return check;
  std::vector<Box> clipped;
  for (Piece& p : pieces) {
    check.covered += p.box.volume();
    clipped.push_back(std::move(p.box));
  }
  if (check.covered < global.volume()) check.gap = FindGap(global, std::move(clipped), 0);
  return check;
}

}  // namespace distckpt
