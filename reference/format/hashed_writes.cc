#include "format/hashed_writes.h"

#include <atomic>
#include <vector>

#include "core/helper_pool.h"

namespace distckpt {

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

}  // namespace distckpt
