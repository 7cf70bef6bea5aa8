// Heap accounting for the load-memory benchmark: this file replaces the
// global operator new / delete of the benchmark binary (every form: sized,
// aligned, nothrow, arrays) with malloc-backed versions that keep a count of
// live bytes (malloc_usable_size of each block) and its high-water mark.
//
// What it sees: every C++ allocation (std::vector, std::string, JSON,
// Tensor storage). What it does not: direct malloc/aligned_alloc calls
// (the load path makes none: checked in bench/README.md), thread stacks and
// mmap'd files.
//
// Thread-safety: all functions are thread-safe (relaxed atomics; the peak is
// exact, updated with a compare-exchange loop).
#ifndef DISTCKPT_BENCH_HEAP_COUNTER_H_
#define DISTCKPT_BENCH_HEAP_COUNTER_H_

#include <cstdint>

namespace distckpt::bench {

int64_t HeapLiveBytes();
// Highest live byte count since the last ResetHeapPeak().
int64_t HeapPeakBytes();
// Sets the high-water mark to the current live count.
void ResetHeapPeak();

}  // namespace distckpt::bench

#endif  // DISTCKPT_BENCH_HEAP_COUNTER_H_
