// What `distckpt reshard`, `load` and `verify` share about `distckpt index`'s
// sidecar item indexes (reference/format/dcp/sidecar_index.h): the
// --index-dir flag (where the readers look for them: DISTCKPT_INDEX_DIR),
// and the `hint:` line a load prints when it read torch's records whole for
// want of them (verify: when a load would).
//
// Thread-safety: for main's thread (UseIndexDir sets the process's
// environment before any reader opens).
#ifndef DISTCKPT_CLI_INDEX_HINT_H_
#define DISTCKPT_CLI_INDEX_HINT_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "format/checkpoint_metadata.h"
#include "io/env.h"

namespace distckpt {

// --index-dir DIR into `dir`.
void AddIndexDirOption(CLI::App* cmd, std::string& dir);
// DISTCKPT_INDEX_DIR=dir for the readers, when given (under mpirun each
// rank's process parses the same flags and sets its own).
void UseIndexDir(const std::string& dir);

// Whether a load of the checkpoint `dir` (its metadata `md`) reads torch's
// records whole to verify them: a DCP checkpoint torch wrote (one CRC32 a
// record, no item index of its own) with a data file that has no sidecar
// where the readers look (beside it, or in the cache directory under its
// current size).
bool ReadsTorchRecordsWhole(Env* env, const std::string& dir, const CheckpointMetadata& md);
// After a load of `dir` that read `read` bytes for `needed` (or, `would`
// given, "a load under T would read": that it would read at least `read`):
// "hint: ...\n" suggesting `distckpt index shown_dir` when that is over 1.05
// times what it needs and ReadsTorchRecordsWhole (its metadata opened only
// then); "" otherwise.
std::string IndexHint(Env* env, const std::string& dir, uint64_t read, uint64_t needed,
                      const std::string& shown_dir, const std::string& would = "");

}  // namespace distckpt

#endif  // DISTCKPT_CLI_INDEX_HINT_H_
