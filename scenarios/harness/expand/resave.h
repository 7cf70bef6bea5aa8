// The state a training loop that resumed from a checkpoint would save again:
// what a scenario pair's "resave" writes after its load (Megatron's
// load → model.load_state_dict → sharded_state_dict → save).
//
// Thread-safety: pure function.
#ifndef DISTCKPT_SCENARIO_RESAVE_H_
#define DISTCKPT_SCENARIO_RESAVE_H_

#include "format/format.h"
#include "mapping/state_dict.h"

namespace distckpt {

// `request` (a load request: ShardedTensors, ShardedObjects, factories, and
// nonpersistent leaves) with every sharded leaf carrying the data `loaded`
// (the load's state dict) holds at its path, plus the leaves of `loaded`
// the request has not (the common state). A ShardedTensor whose flattened
// range is empty (load dropped it, docs/megatron-semantics.md §1.8) is kept with no
// data, so the save drops it the same way; another requested leaf that
// `loaded` lacks (a strict mode removed it) is not saved again.
Node ResaveState(const Node& request, const Node& loaded);

// Gives every main-replica ShardedObject of `state` (a ResaveState) the
// record `reader` keeps of it (CheckpointReader::ReadObjectRecord; none for
// objects the checkpoint lacks or stores as JSON), so that a save writes the
// objects nobody changed byte for byte as they were stored.
void KeepStoredRecords(Node& state, CheckpointReader& reader);

}  // namespace distckpt

#endif  // DISTCKPT_SCENARIO_RESAVE_H_
