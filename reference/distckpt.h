// distckpt: the public API in one include.
//
//   #include <distckpt/distckpt.h>      // installed package (find_package(distckpt))
//   #include "distckpt.h"               // in the source tree
//
// Exactly the headers included below are public (docs/api.md describes
// them); every other header under reference/ is internal and may change
// without notice. Headers keep their folder names ("engine/save.h"), so
// including one of the public headers directly is fine too.
//
// Contracts: every function is collective or rank-local as its header says;
// every failure is a CheckpointError (core/error.h) whose kind says what went
// wrong and whose message names the key, file, rank or topology. A collective
// that fails on one rank throws on every rank.
//
// Thread-safety: as each header states; the usual rule is one call per rank,
// ranks running concurrently (threads of one process or MPI processes).
#ifndef DISTCKPT_DISTCKPT_H_
#define DISTCKPT_DISTCKPT_H_

// Values: errors, dtypes, boxes, host tensors.
#include "core/box.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

// Storage and ranks: the file-system interface and the storage a path or
// URI names (POSIX, s3://), communicators (threads; Open MPI when the package
// was built with it), parallel topologies.
#include "comm/communicator.h"
#include "comm/thread_world.h"
#include "io/env.h"
#include "io/storage_path.h"
#include "topology/topology.h"
#ifdef DISTCKPT_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

// What a rank saves and requests: the sharded state-dict tree and strict
// handling of key mismatches; Megatron's tensor-parallel shards and replica
// ids for a rank of a layout.
#include "mapping/megatron_shard.h"
#include "mapping/sharded_object.h"
#include "mapping/sharded_tensor.h"
#include "mapping/state_dict.h"
#include "mapping/strict.h"

// Formats: native (default) and PyTorch DCP / Megatron torch_dist; the
// format-independent metadata of a committed checkpoint.
#include "format/checkpoint_metadata.h"
#include "format/dcp/dcp_format.h"
#include "format/format.h"

// Strategies: the save / load strategy description (plain, fully parallel,
// two-stage) and its pieces: exchange, the plan cache, async staging and
// finalization, local-checkpoint replication cliques.
#include "strategy/async_queue.h"
#include "strategy/exchange.h"
#include "strategy/fully_parallel.h"
#include "strategy/plan_cache.h"
#include "strategy/replication.h"
#include "strategy/staging.h"
#include "strategy/strategy.h"

// Entry points: save, async save, load, the metadata API (inspection and
// verification without a sharded request), global-space diff, local
// checkpoints.
#include "engine/checkpoint_diff.h"
#include "engine/load.h"
#include "engine/local_checkpoint.h"
#include "engine/metadata_api.h"
#include "engine/options.h"
#include "engine/save.h"
#include "engine/save_async.h"

// Training runs: the checkpoint manager (Megatron's and verl's directory
// layouts, tracker, retention, resume) over the entry points above, and what
// a run's root holds: its layout, its iterations, its tracker.
#include "manager/catalog.h"
#include "manager/layout.h"
#include "manager/manager.h"
#include "manager/retention.h"
#include "manager/tracker.h"

// Conversions: a checkpoint as a Hugging Face model (architecture chosen
// from the model; exact or refused) and back, other formats, Megatron's
// fsdp_dtensor; verl's checkpoints (FSDP per-rank files imported and
// resharded to another world size, the Megatron backend's component folders).
#include "engine/verl_convert.h"
#include "format/verl/verl_megatron.h"
#include "format/verl/verl_reshard.h"
#include "interop/convert.h"
#include "interop/fsdp_dtensor_export.h"
#include "interop/hf/accounting.h"
#include "interop/hf/export.h"
#include "interop/hf/import.h"
#include "interop/hf/plan.h"
#include "interop/verl_megatron_carry.h"

// Model-state helpers: optimizer state, FSDP layouts, FP8 quantization.
#include "fp8/quantize.h"
#include "fsdp/layout.h"
#include "optim/optimizer_state.h"

#endif  // DISTCKPT_DISTCKPT_H_
