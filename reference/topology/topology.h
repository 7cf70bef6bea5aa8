// Topology: parallel sizes and rank order, parsed from the contract string
// "tp=2,pp=4,dp=2[,cp=N][,ep=N][,vpp=N][,dp_shard=N][,order=tp-cp-ep-dp-pp]".
//
// dp_shard (HSDP): the DP group is dp_replicate x dp_shard with dp_shard
// fastest (torch's (replicate, shard) device mesh): an FSDP layout shards
// over the dp_shard ranks (times cp) and replicates over dp / dp_shard.
// It must divide dp; absent (or equal to dp) means plain FSDP over all of
// DP. It does not change rank order or anything without an FSDP layout.
//
// Missing sizes are 1. world = tp*cp*dp*pp. ep must divide dp*cp and applies
// to expert tensors only (expert data parallel edp = dp*cp/ep). The default
// order "tp-cp-ep-dp-pp" lists dims fastest-varying first, as Megatron's
// RankGenerator does; ep is not a separate factor of the world (it splits
// cp*dp), so orders name tp, cp, dp, pp (ep optional, ignored for ranks).
//
// Thread-safety: value type.
#ifndef DISTCKPT_TOPOLOGY_TOPOLOGY_H_
#define DISTCKPT_TOPOLOGY_TOPOLOGY_H_

#include <string>
#include <string_view>
#include <vector>

namespace distckpt {

enum class MeshDim { kTp, kCp, kDp, kPp, kEp, kEdp };
std::string_view MeshDimName(MeshDim dim);    // "tp", "cp", ...
MeshDim ParseMeshDim(std::string_view name);  // throws kInvalidArgument

struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0, edp = 0;  // expert-parallel view of (cp, dp)
  int Get(MeshDim dim) const;
};

class Topology {
 public:
  Topology() = default;
  // Throws CheckpointError(kInvalidArgument) naming the bad field.
  // Sizes beyond kMaxWorldSize ranks (or pp*vpp stages) are refused, so
  // every product of sizes fits in int.
  static constexpr int64_t kMaxWorldSize = 1 << 20;
  static Topology Parse(std::string_view text);

  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  int dp_shard = 0;  // HSDP inner shard size; 0 = dp (normalized: never equal to dp)
  std::vector<MeshDim> order{MeshDim::kTp, MeshDim::kCp, MeshDim::kDp, MeshDim::kPp};

  int world_size() const { return tp * cp * dp * pp; }
  int edp() const { return dp * cp / ep; }
  // HSDP: DP ranks per FSDP shard group and the replicas of it (dp_shard_size() * dp_replicate() ==
  // dp).
  int dp_shard_size() const { return dp_shard == 0 ? dp : dp_shard; }
  int dp_replicate() const { return dp / dp_shard_size(); }
  int Size(MeshDim dim) const;
  RankCoords Coords(int rank) const;
  int RankOf(const RankCoords& coords) const;
  // Global ranks sharing every coordinate but `dim` with `rank`, ordered by `dim`'s coordinate.
  std::vector<int> Group(int rank, MeshDim dim) const;
  // Canonical string: sizes that are not 1 (tp,cp,ep,dp,dp_shard,pp,vpp), order if not default;
  // "tp=1" for a single rank.
  std::string ToString() const;
  friend bool operator==(const Topology&, const Topology&) = default;
};

}  // namespace distckpt

#endif  // DISTCKPT_TOPOLOGY_TOPOLOGY_H_
