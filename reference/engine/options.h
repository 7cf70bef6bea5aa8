// Options and summaries of save() and load().
//
// Thread-safety: value types.
#ifndef DISTCKPT_ENGINE_OPTIONS_H_
#define DISTCKPT_ENGINE_OPTIONS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "format/format.h"
#include "io/env.h"
#include "mapping/strict.h"
#include "strategy/exchange.h"
#include "strategy/fully_parallel.h"
#include "strategy/plan_cache.h"

namespace distckpt {

class StagingPool;

struct SaveOptions {
  const Format* format = nullptr;  // nullptr = NativeFormat()
  Env* env = nullptr;              // nullptr = Env::Default()
  bool validate_access_integrity = true;
  bool overwrite = false;  // replace a committed checkpoint (via staging)
  std::string topology;    // recorded in the metadata
  nlohmann::json content_metadata =
      nullptr;  // Megatron's content_metadata (common['content_metadata'])

  // Fully parallel save (strategy/fully_parallel.h): each shard whose main
  // replica lives in `parallelization_group` (nullptr = the save's
  // communicator, Megatron's WORLD; Megatron training passes DP with CP) is
  // written by one group rank, balancing bytes. `distribution_cache` keeps
  // the distribution while no rank's layout changes (Megatron's
  // do_cache_distribution, checked with one all-reduce).
  bool fully_parallel = false;
  Communicator* parallelization_group = nullptr;
  DistributionCache* distribution_cache = nullptr;

  // Plan and metadata reuse (strategy/plan_cache.h): while one all-reduce
  // finds every rank's structure unchanged since the cached save, skip the
  // validation, common-state and distribution collectives, and gather only
  // checksums for the commit. Takes the place of distribution_cache.
  SavePlanCache* plan_cache = nullptr;

  // Asynchronous save (engine/save_async.h): background writer threads, one
  // data file each; staging buffers from `staging` (nullptr = fresh ones).
  int writers = 1;
  StagingPool* staging = nullptr;
};

struct SaveSummary {
  uint64_t bytes_written = 0;  // this rank
  uint64_t chunks_written = 0;
  double seconds = 0;
  double blocking_seconds = 0;  // async: until SaveAsync returned (staging included)
  uint64_t bytes_staged = 0;    // async: copied into staging buffers; sync: device bytes staged
  std::vector<std::string> warnings;
};

struct LoadOptions {
  Env* env = nullptr;  // nullptr = Env::Default()
  StrictHandling strict = StrictHandling::kAssumeOkUnexpected;
  bool validate_access_integrity = true;
  VerifyPolicy verify = VerifyPolicy::kWhenWhole;

  // Fully parallel load (strategy/fully_parallel.h): every shard is read
  // from storage once within `parallelization_group` (nullptr = the load's
  // communicator) and exchanged with `exchange`.
  bool fully_parallel = false;
  Communicator* parallelization_group = nullptr;
  ExchangeAlgorithm exchange = ExchangeAlgorithm::kBroadcast;
  DistributionCache* distribution_cache = nullptr;
  // Plan only (`distckpt verify`): everything a load decides — strict
  // handling, access validation, the plan of every requested shard (coverage,
  // global shape, key lookup) — with the same rules and messages, but no data
  // file is opened and nothing is read: the result's state_dict is empty and
  // summary.bytes_needed counts the stored bytes a load would read.
  bool plan_only = false;
  // Two-stage load (strategy/two_stage.h): within `parallelization_group`
  // (the DP group), the lowest rank holding a shard reads it and broadcasts
  // it, one shard at a time. Takes precedence over fully_parallel.
  bool two_stage = false;
};

struct LoadSummary {
  uint64_t bytes_needed = 0;  // stored bytes overlapping this rank's request
  uint64_t bytes_read = 0;    // bytes this rank read from data files
  uint64_t bytes_loaded = 0;  // destination bytes filled
  uint64_t chunk_bytes = 0;   // total size of the stored chunks the reads touched
  uint64_t chunks_verified = 0;
  uint64_t chunks_unverified = 0;  // partially read: checksum not checkable
  ExchangeStats exchange;          // fully parallel / two-stage exchange of this rank
  double seconds = 0;
  std::vector<std::string> warnings;
};

}  // namespace distckpt

#endif  // DISTCKPT_ENGINE_OPTIONS_H_
