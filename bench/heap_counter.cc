#include "heap_counter.h"

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace distckpt::bench {
namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};

void* Track(void* p) {
  if (p == nullptr) return p;
  const auto size = static_cast<int64_t>(malloc_usable_size(p));
  const int64_t now = live.fetch_add(size, std::memory_order_relaxed) + size;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  return p;
}

void Untrack(void* p) {
  if (p == nullptr) return;
  live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

void* Allocate(size_t size, size_t alignment, bool nothrow) {
  if (size == 0) size = 1;
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr && !nothrow) throw std::bad_alloc();
  return Track(p);
}

}  // namespace

int64_t HeapLiveBytes() { return live.load(std::memory_order_relaxed); }
int64_t HeapPeakBytes() { return peak.load(std::memory_order_relaxed); }
void ResetHeapPeak() {
  peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace distckpt::bench

using distckpt::bench::Allocate;
using distckpt::bench::Untrack;

void* operator new(size_t n) { return Allocate(n, 0, false); }
void* operator new[](size_t n) { return Allocate(n, 0, false); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0, true); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0, true); }
void* operator new(size_t n, std::align_val_t a) { return Allocate(n, size_t(a), false); }
void* operator new[](size_t n, std::align_val_t a) { return Allocate(n, size_t(a), false); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, size_t(a), true);
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, size_t(a), true);
}
void operator delete(void* p) noexcept { Untrack(p); }
void operator delete[](void* p) noexcept { Untrack(p); }
void operator delete(void* p, size_t) noexcept { Untrack(p); }
void operator delete[](void* p, size_t) noexcept { Untrack(p); }
void operator delete(void* p, std::align_val_t) noexcept { Untrack(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Untrack(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { Untrack(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { Untrack(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Untrack(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Untrack(p); }
