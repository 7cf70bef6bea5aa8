// Hashing ahead of in-order writes: a writer whose items are hashed piece
// by piece (native block checksums, DCP block CRC32s) lends the hashing of
// a large item to helper-pool threads (core/helper_pool.h) while its own
// thread writes the pieces in order, each once its hash is in. The sizes
// below are measured (bench/README.md, "Hashing on a helper"): smaller items
// gain less on tmpfs and lose on ext4.
//
// Thread-safety: AppendWhileHelpersHash is called by one writing thread per
// item; `hash` runs on it and on helpers at once (for distinct pieces).
#ifndef DISTCKPT_FORMAT_HASHED_WRITES_H_
#define DISTCKPT_FORMAT_HASHED_WRITES_H_

#include <cstddef>
#include <functional>

namespace distckpt {

// Items of at least this many bytes are hashed by helpers, when there are.
inline constexpr size_t kHashOffloadMinBytes = 512 << 10;
// Pieces small enough that a helper, which takes tens of microseconds to
// wake, still finds most of an item to hash; each write takes the pieces
// already hashed, up to kMaxHashedRunBytes (64 KiB writes that do not start
// on a page cost ext4 a fifth more than 256 KiB ones).
inline constexpr size_t kHashedPieceBytes = 64 << 10;
inline constexpr size_t kMaxHashedRunBytes = 1 << 20;

// Calls append(begin, end) on this thread for consecutive runs of pieces
// [begin, end) covering [0, pieces), at most `max_run` pieces each, once
// hash(i) has returned for each of them, while up to `helpers` pool threads
// call hash on the pieces ahead. Every piece is hashed once, by whichever
// call claims it first; this thread hashes one itself rather than wait for
// piece `begin` while one is unclaimed, and waits only for a helper that has
// claimed it (so has started, and finishes). If append throws, the helpers
// stop after the piece in hand and the exception passes on once they have
// returned. `hash` must not throw.
void AppendWhileHelpersHash(size_t pieces, size_t max_run, int helpers,
                            const std::function<void(size_t)>& hash,
                            const std::function<void(size_t, size_t)>& append);

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_HASHED_WRITES_H_
