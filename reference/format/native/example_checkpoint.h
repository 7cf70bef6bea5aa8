// A small two-rank native checkpoint for the format tests: tensor "w" (f32
// [8, 5], split over rows), "flat" (f32 [4, 6], one box split into flat
// ranges), "b" (bf16 [3], rank 0 only) and object "rng" (one per rank).
// Values depend on `seed`, so an overwrite is told apart from the original.
//
// Thread-safety: pure functions (plus the files they write).
#ifndef DISTCKPT_FORMAT_NATIVE_EXAMPLE_CHECKPOINT_H_
#define DISTCKPT_FORMAT_NATIVE_EXAMPLE_CHECKPOINT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "format/format.h"

namespace distckpt {

// Prepares `dir`, writes both ranks and commits; returns the committed metadata.
CheckpointMetadata SaveExampleCheckpoint(Env* env, const std::string& dir, int seed = 0,
                                         bool overwrite = false);
// The bytes the example stores for `chunk` of tensor `key`.
std::vector<std::byte> ExampleChunkBytes(const std::string& key, const StoredChunk& chunk,
                                         int seed = 0);
std::string ExampleObjectPayload(int rank, int seed = 0);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_EXAMPLE_CHECKPOINT_H_
