// Local (non-persistent) checkpoints with replication (docs/megatron-semantics.md
// §4.8: Megatron's --non-persistent-ckpt-type local with NVRx's
// LocalCheckpointManager and CliqueReplicationStrategy).
//
// SaveLocal: every rank serializes its own part of the state dict — every
// ShardedTensor it holds (replicas included, so it can resume without any
// other rank), its objects and the common state — into one blob; the blobs
// are all-gathered within each replication clique (strategy/replication.h)
// and each member writes every member's blob to <root>/<rank>/
// (strategy/local_store.h). Only when every rank has written do older
// iterations go; a failure on any rank removes this iteration's files on
// every rank, so no partial iteration is left and the previous one stays.
//
// LoadLocal: the newest iteration every rank can recover — from its own
// file or from a clique peer's copy — is loaded; a rank missing its file
// receives it from a holder chosen by a generator seeded with 0 (NVRx's
// Random(0)), one blob at a time. The request must ask for the saved
// shards (same keys, offsets, shapes; dtypes may differ and are
// converted). When some rank's file is lost with all its copies, every
// rank throws CheckpointError(kIncomplete) "no replicas available for rank
// R (iteration I) ...".
//
// Thread-safety: collective; one call per rank.
#ifndef DISTCKPT_ENGINE_LOCAL_CHECKPOINT_H_
#define DISTCKPT_ENGINE_LOCAL_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/options.h"
#include "mapping/state_dict.h"

namespace distckpt {

struct LocalOptions {
  std::string root;    // node-local directory, rank r uses root/r
  Env* env = nullptr;  // nullptr = Env::Default()
  // Replication cliques partitioning the ranks (strategy/replication.h
  // Cliques(world, {J, F}), or explicit groups); empty = no replication.
  std::vector<std::vector<int>> groups;
};

SaveSummary SaveLocal(const Node& state_dict, int64_t iteration, Communicator& comm,
                      const LocalOptions& options);

struct LocalLoadResult {
  Node state_dict;
  int64_t iteration = 0;
  bool recovered_from_peer = false;  // this rank's file came from a clique peer
  LoadSummary summary;
};

LocalLoadResult LoadLocal(const Node& request, Communicator& comm, const LocalOptions& options);

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_LOCAL_CHECKPOINT_H_
