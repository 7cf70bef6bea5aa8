// NativeWriter: writes one rank's data files of a native checkpoint (format
// version 3, FORMAT.md): every tensor chunk and object payload is appended,
// as raw bytes with no header, to a data file `__<rank>_<i>.bin` that the
// writer chooses (i = its stream: 0 unless several writers share the rank's
// data, as async save's do). A chunk's payload is followed by its per-block
// checksums (block_checksums.h; 8 bytes a block), and the chunk records
// their checksum; an object records its checksum. Checks and bookkeeping:
// data_file_writer.h.
//
// Hashing: a chunk is hashed piece by piece on the writing thread, each
// piece right before it is written, unless SetHelpers(n > 0) was called and
// the chunk is large (format/hashed_writes.h): then helper-pool threads hash its
// pieces while the writing thread writes them, in order, each once its
// checksums are in, and hashes a piece itself rather than wait for one that
// no helper has taken (so with no helper free it hashes everything, as
// without helpers). Chunks smaller than that, handed over together
// (WriteTensorChunks), are hashed ahead by helpers chunk by chunk while the
// writing thread writes runs of hashed chunks, each run's payloads and
// checksums in one gathered write. The file is the same either way. An I/O
// error stops the helpers and is thrown once they have returned.
//
// Thread-safety: a writer belongs to one rank and is used by one thread
// (which may borrow helper threads during a WriteTensorChunk).
#ifndef DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
#define DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/data_file_writer.h"

namespace distckpt {

// "__<rank>_<index>.bin".
std::string DataFileName(int rank, int index);
// True exactly for the names DataFileName produces.
bool IsDataFileName(std::string_view name);

class NativeWriter : public DataFileWriter {
 public:
  NativeWriter(Env* env, std::string dir, int rank, int stream = 0);

 private:
  void StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                  std::span<const std::byte> bytes) override;
  void StoreChunks(std::span<PendingChunk> chunks) override;
  void StoreObject(StoredObject& object, std::span<const std::byte> bytes) override;
  // Small chunks hashed ahead by helpers (at least two chunks).
  void StoreSmallChunks(std::span<PendingChunk> chunks);

  std::vector<uint64_t> sums_;  // the current chunk's (or chunks') block checksums
};

}  // namespace distckpt

#endif  // DISTCKPT_FORMAT_NATIVE_NATIVE_WRITER_H_
