// Options and summaries of save() and load().
//
// Thread-safety: value types.
#ifndef DISTCKPT_ENGINE_OPTIONS_H_
#define DISTCKPT_ENGINE_OPTIONS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/format.h"
#include "io/env.h"
#include "mapping/strict.h"
#include "strategy/exchange.h"
#include "strategy/strategy.h"

namespace distckpt {

struct SaveOptions {
  const Format* format = nullptr;  // nullptr = NativeFormat()
  Env* env = nullptr;              // nullptr = Env::Default()
  bool validate_access_integrity = true;
  bool overwrite = false;  // replace a committed checkpoint (via staging)
  std::string topology;    // recorded in the metadata
  nlohmann::json content_metadata =
      nullptr;  // Megatron's content_metadata (common['content_metadata'])
  // The common state as a checkpoint stored it (CheckpointReader::CommonRecord):
  // a format keeping the common state as an object (Format::CommonStateAsObject)
  // of the record's encoding writes these bytes while the common state saved
  // equals the record's value (a reshard keeps Python values JSON would change).
  std::shared_ptr<const ObjectRecord> common_record;

  // How the writing is spread (plain or fully parallel over a group), the
  // plan cache, and SaveAsync's writers (strategy/strategy.h).
  SaveStrategy strategy;
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

  // How the reading is spread: plain, fully parallel with an exchange, or
  // two-stage, over a group (strategy/strategy.h).
  LoadStrategy strategy;
  // Plan only (`distckpt verify`): everything a load decides — strict
  // handling, access validation, the plan of every requested shard (coverage,
  // global shape, key lookup) — with the same rules and messages, but no data
  // file is opened and nothing is read: the result's state_dict is empty and
  // summary.bytes_needed counts the stored bytes a load would read.
  bool plan_only = false;
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
