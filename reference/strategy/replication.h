// Clique replication of local checkpoints (docs/megatron-semantics.md §4.8, NVRx
// CliqueReplicationStrategy.from_replication_params(J, F)): the world of W
// ranks is split into W / F cliques {n, n+J, ..., n+(F-1)J} with
// n = a*J*F + b (a < W/(J*F), b < J); every member of a clique stores the
// local checkpoint of every other member. J is typically the number of
// ranks per node, so that copies land on other nodes. W must be divisible
// by J*F. Explicit groups (Megatron's test uses [[2, 6, 7], [3, 1], [5],
// [0, 4]]) are accepted too.
//
// Thread-safety: pure functions.
#ifndef DISTCKPT_STRATEGY_REPLICATION_H_
#define DISTCKPT_STRATEGY_REPLICATION_H_

#include <string_view>
#include <vector>

namespace distckpt {

struct ReplicationParams {
  int jump = 1;    // J
  int factor = 1;  // F: copies of each rank's checkpoint (1 = none)
};

// "J,F", e.g. "8,2"; kInvalidArgument naming the text otherwise.
ReplicationParams ParseReplicationParams(std::string_view text);

// The cliques of `world` ranks, each in increasing rank order, ordered by
// their smallest rank. kInvalidArgument unless J, F >= 1 and world % (J*F) == 0.
std::vector<std::vector<int>> Cliques(int world, ReplicationParams params);

// Checks that `groups` partition ranks 0..world-1 (kInvalidArgument naming
// the rank missing or listed twice) and returns the index of `rank`'s group.
int GroupIndexOf(const std::vector<std::vector<int>>& groups, int world, int rank);

}  // namespace distckpt

#endif  // DISTCKPT_STRATEGY_REPLICATION_H_
