#include "format/native/native_writer.h"

#include <algorithm>
#include <atomic>
#include <functional>

#include "core/error.h"
#include "core/helper_pool.h"
#include "format/native/block_checksums.h"
#include "format/native/metadata_json.h"
#include "io/checksum.h"

namespace distckpt {

std::string DataFileName(int rank, int index) { return RankFileName(rank, index, ".bin"); }

bool IsDataFileName(std::string_view name) { return IsRankFileName(name, ".bin"); }

namespace {

// Pieces hashed and written by one thread: well inside a core's L2.
constexpr size_t kPieceBytes = 256 << 10;
// When helpers hash: pieces small enough that a helper, which takes tens of
// microseconds to wake, still finds most of a chunk to hash; each write takes
// the pieces already hashed, up to kMaxWriteBytes (64 KiB writes that do not
// start on a page cost ext4 a fifth more than 256 KiB ones).
constexpr size_t kHelpedPieceBytes = 64 << 10;
constexpr size_t kMaxWriteBytes = 1 << 20;

CheckpointMetadata NativeHeader() {
  CheckpointMetadata md;
  md.format = "native";
  md.format_version = kNativeFormatVersion;
  return md;
}

// Calls append(begin, end) on this thread for consecutive runs of pieces
// [begin, end) covering [0, pieces), at most `max_run` pieces each, once
// hash(i) has returned for each of them, while up to `helpers` pool threads
// call hash on the pieces ahead. Every piece is hashed once, by whichever
// call claims it first; this thread hashes one itself rather than wait for
// piece `begin` while one is unclaimed, and waits only for a helper that has
// claimed it (so has started, and finishes). If append throws, the helpers
// stop after the piece in hand and the exception passes on once they have
// returned.
void AppendWhileHelpersHash(size_t pieces, size_t max_run, int helpers,
                            const std::function<void(size_t)>& hash,
                            const std::function<void(size_t, size_t)>& append) {
  std::vector<std::atomic<bool>> hashed(pieces);
  std::atomic<size_t> next{0};  // the next piece to claim for hashing
  auto hash_next = [&] {
    const size_t i = next.fetch_add(1);
    if (i >= pieces) return false;
    hash(i);
    hashed[i].store(true, std::memory_order_release);
    hashed[i].notify_one();
    return true;
  };
  RunWithHelpers(helpers, [&](size_t call) {
    if (call != 0) {
      while (hash_next()) {
      }
      return;
    }
    try {
      for (size_t begin = 0, end; begin < pieces; begin = end) {
        while (!hashed[begin].load(std::memory_order_acquire) && hash_next()) {
        }
        hashed[begin].wait(false, std::memory_order_acquire);
        end = begin + 1;
        while (end < std::min(pieces, begin + max_run) &&
               hashed[end].load(std::memory_order_acquire)) {
          ++end;
        }
        append(begin, end);
      }
    } catch (...) {
      next = pieces;
      throw;
    }
  });
}

}  // namespace

NativeWriter::NativeWriter(Env* env, std::string dir, int rank, int stream)
    : DataFileWriter(env, std::move(dir), rank, DataFileName(rank, stream), NativeHeader()) {}

// Version 3 chunks: one bound checksum per block (block_checksums.h),
// computed piece by piece right before the write copies the piece, while it
// is in the cache (one pass over memory instead of two), or for large chunks
// by helpers while the writes go on; then written after the payload; the
// chunk keeps their checksum.
void NativeWriter::StoreChunk(const StoredTensor& tensor, StoredChunk& chunk,
                              std::span<const std::byte> bytes) {
  chunk.offset = Append({});
  chunk.checksum.reset();
  chunk.block_checksums.clear();
  chunk.block_size = ChooseBlockSize(bytes.size());
  const uint64_t seed = ChunkBindingSeed(tensor.key, tensor.dtype, chunk);
  sums_.resize(BlockCount(bytes.size(), chunk.block_size));
  const bool offload = helpers_ > 0 && bytes.size() >= kOffloadMinBytes;
  // Pieces of whole blocks (the block size divides the piece size or exceeds it).
  const size_t piece_bytes =
      std::max<size_t>(offload ? kHelpedPieceBytes : kPieceBytes, chunk.block_size);
  const size_t pieces = (bytes.size() + piece_bytes - 1) / piece_bytes;
  // Pieces [begin, end).
  auto pieces_bytes = [&](size_t begin, size_t end) {
    return bytes.subspan(begin * piece_bytes,
                         std::min(end * piece_bytes, bytes.size()) - begin * piece_bytes);
  };
  auto hash = [&](size_t i) {
    std::span<const std::byte> data = pieces_bytes(i, i + 1);
    const size_t first = i * piece_bytes / chunk.block_size;
    for (size_t b = 0; b * chunk.block_size < data.size(); ++b) {
      sums_[first + b] = BlockChecksum(
          data.subspan(b * chunk.block_size,
                       std::min<size_t>(chunk.block_size, data.size() - b * chunk.block_size)),
          seed, first + b);
    }
  };
  if (offload) {
    AppendWhileHelpersHash(pieces, kMaxWriteBytes / piece_bytes, helpers_, hash,
                           [&](size_t begin, size_t end) { Append(pieces_bytes(begin, end)); });
  } else {
    for (size_t i = 0; i < pieces; ++i) {
      hash(i);
      Append(pieces_bytes(i, i + 1));
    }
  }
  AppendChecksums(std::as_bytes(std::span(sums_)));
  chunk.sums_checksum = SumsChecksum(sums_, seed);
}

void NativeWriter::StoreObject(StoredObject& object, std::span<const std::byte> bytes) {
  object.length = bytes.size();
  // Objects are small and always read whole: one checksum, bound to the unique key.
  object.offset = Append(bytes);
  object.checksum = Checksum(bytes, ObjectBindingSeed(object.unique_key));
}

}  // namespace distckpt
