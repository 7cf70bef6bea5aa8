#include "strategy/replication.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "core/error.h"

namespace distckpt {

ReplicationParams ParseReplicationParams(std::string_view text) {
  ReplicationParams p;
  const size_t comma = text.find(',');
  auto parse = [&](std::string_view part, int& out) {
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && end == part.data() + part.size() && out >= 1;
  };
  if (comma == std::string_view::npos || !parse(text.substr(0, comma), p.jump) ||
      !parse(text.substr(comma + 1), p.factor)) {
    Fail(ErrorKind::kInvalidArgument,
         "replication '{}': expected J,F (jump and factor, both >= 1), e.g. 8,2", text);
  }
  return p;
}

std::vector<std::vector<int>> Cliques(int world, ReplicationParams params) {
  const int j = params.jump, f = params.factor;
  if (j < 1 || f < 1 || world % (j * f) != 0) {
    Fail(ErrorKind::kInvalidArgument,
         "replication jump {} and factor {}: the world size {} must be divisible by jump * factor",
         j, f, world);
  }
  std::vector<std::vector<int>> cliques;
  for (int a = 0; a < world / (j * f); ++a) {
    for (int b = 0; b < j; ++b) {
      std::vector<int>& clique = cliques.emplace_back();
      for (int k = 0; k < f; ++k) clique.push_back(a * j * f + b + k * j);
    }
  }
  return cliques;
}

int GroupIndexOf(const std::vector<std::vector<int>>& groups, int world, int rank) {
  std::vector<int> group_of(world, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int r : groups[g]) {
      if (r < 0 || r >= world)
        Fail(ErrorKind::kInvalidArgument, "replication group lists rank {} of a world of {}", r,
             world);
      if (group_of[r] >= 0)
        Fail(ErrorKind::kInvalidArgument, "rank {} is in two replication groups", r);
      group_of[r] = static_cast<int>(g);
    }
  }
  auto missing = std::find(group_of.begin(), group_of.end(), -1);
  if (missing != group_of.end()) {
    Fail(ErrorKind::kInvalidArgument, "rank {} is in no replication group",
         missing - group_of.begin());
  }
  return group_of[rank];
}

}  // namespace distckpt
