// Writing a checkpoint outside a training job (conversions, imports): the
// format's save protocol (save lock, prepare, writers, commit) driven by
// hand, as engine/save.cc does for a job.
//
// Refused (kInvalidArgument) when `out` holds a committed checkpoint.
// Thread-safety: one call at a time per `out` (the save lock says so).
#ifndef DISTCKPT_INTEROP_OFFLINE_WRITER_H_
#define DISTCKPT_INTEROP_OFFLINE_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/format.h"
#include "io/env.h"

namespace distckpt {

// Writes a checkpoint into `out` from one writer, rank 0, holding the save
// lock: `fill` writes chunks and objects; the commit takes topology, common
// and content from `like`. Returns the bytes written.
uint64_t WriteWithOneWriter(Env* env, const std::string& out, const Format& format,
                            const CheckpointMetadata& like,
                            const std::function<void(CheckpointWriter&)>& fill);
// The same with `ranks` writers (rank r writes its own files), all in this
// process; the commit also takes `like.topology`.
uint64_t WriteWithRankWriters(
    Env* env, const std::string& out, const Format& format, const CheckpointMetadata& like,
    int ranks, const std::function<void(std::vector<std::unique_ptr<CheckpointWriter>>&)>& fill);

}  // namespace distckpt

#endif  // DISTCKPT_INTEROP_OFFLINE_WRITER_H_
