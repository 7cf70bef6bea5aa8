#include "topology/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace distckpt {
namespace {

const std::vector<MeshDim> kDefaultOrder{MeshDim::kTp, MeshDim::kCp, MeshDim::kDp, MeshDim::kPp};

int ParsePositive(std::string_view field, std::string_view value, std::string_view text) {
  int out = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || ptr != value.data() + value.size() || out < 1) {
    Fail(ErrorKind::kInvalidArgument,
         "invalid topology '{}': {} must be a positive integer, got '{}'", text, field, value);
  }
  return out;
}

// "tp-cp-ep-dp-pp" -> the dims that index ranks (ep is a view of cp x dp, so skipped).
std::vector<MeshDim> ParseOrder(std::string_view value, std::string_view text) {
  std::vector<MeshDim> order;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find('-', start);
    if (end == std::string_view::npos) end = value.size();
    std::string_view name = value.substr(start, end - start);
    MeshDim dim = ParseMeshDim(name);
    if (dim == MeshDim::kEdp) {
      Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': order may not name edp", text);
    }
    if (dim != MeshDim::kEp) {
      if (std::find(order.begin(), order.end(), dim) != order.end()) {
        Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': order names {} twice", text,
             name);
      }
      order.push_back(dim);
    }
    start = end + 1;
  }
  for (MeshDim dim : kDefaultOrder) {
    if (std::find(order.begin(), order.end(), dim) == order.end()) {
      // Megatron requires every dim of size > 1 in the order; dims of size 1
      // may be omitted. We append omitted dims slowest-varying.
      order.push_back(dim);
    }
  }
  return order;
}

}  // namespace

std::string_view MeshDimName(MeshDim dim) {
  switch (dim) {
    case MeshDim::kTp:
      return "tp";
    case MeshDim::kCp:
      return "cp";
    case MeshDim::kDp:
      return "dp";
    case MeshDim::kPp:
      return "pp";
    case MeshDim::kEp:
      return "ep";
    case MeshDim::kEdp:
      return "edp";
  }
  return "?";
}

MeshDim ParseMeshDim(std::string_view name) {
  for (MeshDim dim :
       {MeshDim::kTp, MeshDim::kCp, MeshDim::kDp, MeshDim::kPp, MeshDim::kEp, MeshDim::kEdp}) {
    if (MeshDimName(dim) == name) return dim;
  }
  Fail(ErrorKind::kInvalidArgument,
       "unknown mesh dimension '{}' (expected tp, cp, dp, pp, ep or edp)", name);
}

namespace {

// The one of six per-dimension values that belongs to `dim`.
int ByDim(MeshDim dim, int tp, int cp, int dp, int pp, int ep, int edp) {
  switch (dim) {
    case MeshDim::kTp:
      return tp;
    case MeshDim::kCp:
      return cp;
    case MeshDim::kDp:
      return dp;
    case MeshDim::kPp:
      return pp;
    case MeshDim::kEp:
      return ep;
    case MeshDim::kEdp:
      return edp;
  }
  Fail(ErrorKind::kInvalidArgument, "invalid mesh dimension {}", static_cast<int>(dim));
}

}  // namespace

int RankCoords::Get(MeshDim dim) const { return ByDim(dim, tp, cp, dp, pp, ep, edp); }

Topology Topology::Parse(std::string_view text) {
  Topology t;
  std::vector<std::string> seen;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const bool more = comma != std::string_view::npos;  // "tp=2," has an empty last field
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    // trim spaces
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) {
      Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': empty field", text);
    }
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': field '{}' is not name=value", text,
           item);
    }
    std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': {} given twice", text, name);
    }
    seen.emplace_back(name);
    if (name == "tp")
      t.tp = ParsePositive(name, value, text);
    else if (name == "pp")
      t.pp = ParsePositive(name, value, text);
    else if (name == "dp")
      t.dp = ParsePositive(name, value, text);
    else if (name == "cp")
      t.cp = ParsePositive(name, value, text);
    else if (name == "ep")
      t.ep = ParsePositive(name, value, text);
    else if (name == "vpp")
      t.vpp = ParsePositive(name, value, text);
    else if (name == "dp_shard")
      t.dp_shard = ParsePositive(name, value, text);
    else if (name == "order")
      t.order = ParseOrder(value, text);
    else {
      Fail(ErrorKind::kInvalidArgument,
           "invalid topology '{}': unknown field '{}' (expected tp, pp, dp, cp, ep, vpp, dp_shard, "
           "order)",
           text, name);
    }
    if (!more) break;
  }
  // Checked before any product is formed in int (tp=65536,pp=65536 was a
  // world of 0, tp=4,pp=1073741825 one of 4).
  // Each factor < 2^31 and the running product <= kMaxWorldSize < 2^31
  // before each step: int64 never overflows.
  int64_t world = 1;
  for (int size : {t.tp, t.cp, t.dp, t.pp}) {
    world *= size;
    if (world > kMaxWorldSize) {
      Fail(ErrorKind::kInvalidArgument,
           "invalid topology '{}': tp*cp*dp*pp exceeds the largest supported world of {} ranks",
           text, kMaxWorldSize);
    }
  }
  if (int64_t{t.pp} * t.vpp > kMaxWorldSize) {
    Fail(ErrorKind::kInvalidArgument,
         "invalid topology '{}': pp*vpp = {} exceeds the largest supported {} virtual stages", text,
         int64_t{t.pp} * t.vpp, kMaxWorldSize);
  }
  if (t.dp_shard != 0 && t.dp % t.dp_shard != 0) {
    Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': dp_shard={} must divide dp={}", text,
         t.dp_shard, t.dp);
  }
  if (t.dp_shard == t.dp) t.dp_shard = 0;
  if ((t.dp * t.cp) % t.ep != 0) {
    Fail(ErrorKind::kInvalidArgument, "invalid topology '{}': ep={} must divide dp*cp={}", text,
         t.ep, t.dp * t.cp);
  }
  return t;
}

int Topology::Size(MeshDim dim) const { return ByDim(dim, tp, cp, dp, pp, ep, edp()); }

RankCoords Topology::Coords(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    Fail(ErrorKind::kInvalidArgument, "rank {} outside world of {} ({})", rank, world_size(),
         ToString());
  }
  RankCoords c;
  int r = rank;
  for (MeshDim dim : order) {
    int size = Size(dim);
    int coord = r % size;
    r /= size;
    switch (dim) {
      case MeshDim::kTp:
        c.tp = coord;
        break;
      case MeshDim::kCp:
        c.cp = coord;
        break;
      case MeshDim::kDp:
        c.dp = coord;
        break;
      case MeshDim::kPp:
        c.pp = coord;
        break;
      default:
        break;
    }
  }
  // Expert view: the combined (cp, dp) index splits into ep (fastest) and edp,
  // matching Megatron's "tp-cp-ep-dp-pp" expert rank generator.
  int cp_dp = c.dp * cp + c.cp;
  c.ep = cp_dp % ep;
  c.edp = cp_dp / ep;
  return c;
}

int Topology::RankOf(const RankCoords& coords) const {
  int rank = 0, stride = 1;
  for (MeshDim dim : order) {
    rank += coords.Get(dim) * stride;
    stride *= Size(dim);
  }
  return rank;
}

std::vector<int> Topology::Group(int rank, MeshDim dim) const {
  // Members share every coordinate except `dim`; the expert dims (ep, edp)
  // partition the (cp, dp) plane, so each is varied with the other fixed.
  std::vector<MeshDim> fixed{MeshDim::kTp, MeshDim::kPp};
  if (dim == MeshDim::kEp)
    fixed.push_back(MeshDim::kEdp);
  else if (dim == MeshDim::kEdp)
    fixed.push_back(MeshDim::kEp);
  else
    fixed = {MeshDim::kTp, MeshDim::kCp, MeshDim::kDp, MeshDim::kPp};
  RankCoords me = Coords(rank);
  std::vector<std::pair<int, int>> members;  // (coordinate along dim, rank)
  for (int r = 0; r < world_size(); ++r) {
    RankCoords c = Coords(r);
    bool same = std::all_of(fixed.begin(), fixed.end(),
                            [&](MeshDim d) { return d == dim || c.Get(d) == me.Get(d); });
    if (same) members.emplace_back(c.Get(dim), r);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> out;
  for (const auto& member : members) out.push_back(member.second);
  return out;
}

std::string Topology::ToString() const {
  std::string out;
  auto add = [&](std::string_view name, int v) {
    if (v == 1) return;
    if (!out.empty()) out += ',';
    out += fmt::format("{}={}", name, v);
  };
  add("tp", tp);
  add("cp", cp);
  add("ep", ep);
  add("dp", dp);
  if (dp_shard != 0) out += fmt::format(",dp_shard={}", dp_shard);
  add("pp", pp);
  add("vpp", vpp);
  if (out.empty()) out = "tp=1";
  if (order != kDefaultOrder) {
    std::string o;
    for (MeshDim d : order) o += fmt::format("{}{}", o.empty() ? "" : "-", MeshDimName(d));
    out += ",order=" + o;
  }
  return out;
}

}  // namespace distckpt
