// Checks against an existing checkpoint (`distckpt verify`, `reshard`):
//
// VerifyLoad answers "would this checkpoint load under topology T with this
// request spec?" from metadata only. Every rank of T (threads) builds its
// request from the spec and runs the load with LoadOptions::plan_only: the
// same strict handling, access validation and per-shard planning (key
// lookup, global shape, coverage by stored chunks) as a load, with the same
// messages, and no chunk read. Before that, the optimizer-format check of a
// load (dp_reshardable under another TP/PP is refused, as Megatron does) and
// the spec's divisibility checks (naming key or field, axis and sizes). A
// native checkpoint's data files are not opened at all; a DCP checkpoint's
// common state is read as opening one does (common.pt or the common_state
// item), never a tensor item.
//
// VerifyData reads every stored byte once (chunk by chunk, bounded memory)
// and checks every checksum (native xxHash3, DCP zip CRC32), then every file
// Megatron's integrity.json lists (SHA-256) when there is one; damage throws
// CheckpointError(kCorruption) naming file and key. What carries no
// checksum is counted as unverified (DataCheck), never as matching.
//
// Reshard loads, on every rank of T, the spec's request from the checkpoint
// (real stored values, nothing generated; tensors in their stored dtype,
// the spec's load_dtype ignored) and saves it under T into `out`. Objects
// whose grid changes under T are not requested (objects cannot be
// resharded), so they are absent from `out`; the others, and the common
// state, are written as stored (KeepStoredRecords, SaveOptions::common_record)
// when `out`'s format stores the records the checkpoint's reader gives (DCP
// to DCP), else from their JSON values.
//
// Thread-safety: reentrant (distinct output directories).
#ifndef DISTCKPT_SCENARIO_VERIFY_H_
#define DISTCKPT_SCENARIO_VERIFY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "engine/load.h"
#include "format/format.h"
#include "harness/spec/spec.h"
#include "io/env.h"
#include "mapping/strict.h"

namespace distckpt {

struct VerifyOptions {
  StrictHandling strict = StrictHandling::kAssumeOkUnexpected;
  std::string saved_topology;  // "" = the one the checkpoint records (may be none)
  Env* env = nullptr;          // nullptr = Env::Default()
};

// What a load (or reshard) under a topology does to one object the
// checkpoint stores: Megatron's rng_state lives on a (PP, TP) grid, the
// rerun state machine's and a dataloader's state per rank; a topology
// change leaves them behind, and users' worst resume bugs are silent ones.
struct ObjectFate {
  std::string key;     // the ShardedObject key
  std::string fate;    // "kept", "regridded" (not carried), "dropped" (not requested)
  std::string detail;  // stored grid and the topology's, or why
};
// Every stored object key, in key order (ranks of `topology` expanded up to
// 4096 of them to find what the spec requests).
// `regrid_objects`: as ReshardRank's (the fate says what is carried).
std::vector<ObjectFate> ObjectFates(const Scenario& spec, const CheckpointMetadata& metadata,
                                    const Topology& topology, bool regrid_objects = false);

struct VerifyResult {
  bool ok = false;
  std::string error;          // why it would not load (agreed over the ranks)
  int ranks = 0;              // world size of the topology
  uint64_t tensors = 0;       // requested ShardedTensors, summed over ranks
  uint64_t objects = 0;       // requested ShardedObjects, summed over ranks
  uint64_t bytes_needed = 0;  // stored bytes a load would read, summed over ranks
  // The sizes of the stored tensor chunks those reads touch, summed over
  // ranks: what a reader that reads every touched record whole (torch's
  // records without an item index) reads at least.
  uint64_t chunk_bytes = 0;
  std::string missing, unexpected;       // return_* modes: sorted, comma-separated
  std::vector<std::string> warnings;     // log_* modes
  std::vector<ObjectFate> objects_fate;  // every stored object (ObjectFates)
  double seconds = 0;
};

// Throws CheckpointError for bad input (the checkpoint cannot be opened, the
// topology string is invalid); every reason the load would fail is a
// result with ok = false.
VerifyResult VerifyLoad(const Scenario& spec, const std::string& dir, const std::string& topology,
                        const VerifyOptions& options = {});

// What VerifyData read, and what of it carried no checksum to check (a
// native version 1 checkpoint: chunks and objects may have none, and
// metadata.json has none; a DCP checkpoint torch wrote: its raw tensor
// items). Unverified bytes are read but cannot be told from damaged ones.
struct DataCheck {
  uint64_t chunks = 0, objects = 0, bytes = 0;
  uint64_t unverified_chunks = 0, unverified_objects = 0;
  bool unverified_metadata = false;
  bool verified() const {
    return unverified_chunks == 0 && unverified_objects == 0 && !unverified_metadata;
  }
  // Megatron's integrity.json (format/dcp/megatron_files.h), when present:
  // every file it lists checked against its SHA-256.
  bool integrity = false;
  uint64_t integrity_files = 0;
};
DataCheck VerifyData(const std::string& dir, Env* env = nullptr);

// What a checkpoint stores, loaded whole under `topology` by rank
// comm.rank(): the request `spec` builds from the stored metadata (tensors,
// and objects unless `objects` is false), Megatron's optimizer refusals
// first (dp_reshardable under another TP/PP, expert param groups across
// EP = 1). Collective; a CheckpointError is agreed by every rank.
struct StoredLoad {
  std::unique_ptr<CheckpointReader> reader;
  Topology topology;
  Node request;
  LoadResult loaded;
  // regrid_objects: object path -> its new (global shape, offset) (ReshardRank).
  std::map<std::string, std::pair<Shape, Shape>> regridded;
};
StoredLoad LoadStored(const Scenario& spec, const std::string& dir, const std::string& topology,
                      StrictHandling strict, Communicator& comm, bool objects = true,
                      bool regrid_objects = false);

struct ReshardResult {
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t bytes_needed = 0;  // the stored bytes the ranks' requests overlap
  // The sizes of the stored tensor chunks the reads touched, over the ranks:
  // what a reader that reads every touched record whole (torch's
  // FileSystemReader: torch.load of the item's byte range) reads at least.
  uint64_t chunk_bytes = 0;
  double seconds = 0;
};
// One rank's part (collective over `comm`, whose size is T's world size).
// Throws CheckpointError (agreed by every rank) when the load or the save
// fails; `out` then holds no committed checkpoint. `objects` false requests
// the spec's tensors only (a checkpoint that stores none of its objects).
// `regrid_objects`: an object stored on another grid (rng_state after a TP/PP
// change) is carried regridded: coordinate c of the new grid holds what the
// stored grid holds at c modulo its extent (verl's load needs every
// coordinate; Megatron's skips rng_state instead).
ReshardResult ReshardRank(const Scenario& spec, const std::string& dir, const std::string& topology,
                          const std::string& out, const Format& format, StrictHandling strict,
                          Communicator& comm, bool objects = true, bool regrid_objects = false);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_VERIFY_H_
