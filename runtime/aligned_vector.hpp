// AlignedVector<T>: a std::vector whose storage starts on a 64-byte (cache line, AVX-512
// vector) boundary, for scratch arrays that vector kernels stream through.
//
// Determinism contract: none needed: alignment changes where data lives, never a value (every
// kernel's operation order is fixed by indices, not addresses). It does change speed: a 64-byte
// load from a buffer 16 bytes off a line boundary (what malloc gives large allocations) touches
// two lines, and the GEMM reads rows of A in place only when they fall on whole lines
// (runtime/gemm_kernel.hpp, rows_spread). Vectors of 2 MiB or more sit on huge pages
// (runtime/host_memory.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/host_memory.hpp"

namespace lockstep {

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U>;
  };
  // std::vector value-initializes what it constructs, so the block need not come zeroed.
  T* allocate(std::size_t n) { return static_cast<T*>(host_alloc(n * sizeof(T), false)); }
  void deallocate(T* p, std::size_t n) noexcept { host_free(p, n * sizeof(T)); }
  friend bool operator==(const AlignedAllocator&, const AlignedAllocator&) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace lockstep
