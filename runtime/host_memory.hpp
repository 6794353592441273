// Host memory for tensors and scratch arrays: 64-byte-aligned blocks, and for blocks of 2 MiB
// or more, memory mapped straight from the kernel, 2 MiB-aligned and advised for transparent
// huge pages (madvise MADV_HUGEPAGE), so that a GPT-2-sized model's few GiB fault in as
// 2 MiB pages instead of a million 4 KiB ones (on a paravirtualised host each fault is
// expensive: docs/benchmarks.md, "PyTorch with huge pages").
//
// Determinism contract: none needed: where a block lives and the size of its pages never
// change a value (every kernel's operation order is fixed by indices, not addresses). A
// zeroed block holds +0.0f bits throughout whichever path made it.
#pragma once

#include <cstddef>

namespace lockstep {

// Blocks of at least this many bytes are mapped, 2 MiB-aligned, with the huge-page advice;
// except under a sanitizer that instruments memory (address, hwaddress, memory), where every
// block comes from its malloc, whose red zones, tags or shadow catch what a bare mapping
// would not.
inline constexpr std::size_t kHostHugeBlock = std::size_t{2} << 20;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_HWADDRESS__)
inline constexpr bool kHostMapsLargeBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(hwaddress_sanitizer) || \
    __has_feature(memory_sanitizer)
inline constexpr bool kHostMapsLargeBlocks = false;
#else
inline constexpr bool kHostMapsLargeBlocks = true;
#endif
#else
inline constexpr bool kHostMapsLargeBlocks = true;
#endif

// A block of `bytes` (0 allowed) starting on a 64-byte boundary. With `zeroed` its bytes are
// zero (mapped blocks always are: fresh anonymous pages). Throws lockstep::Error naming the
// size when the memory is not there. Free it with host_free and the same `bytes`.
void* host_alloc(std::size_t bytes, bool zeroed);
void host_free(void* p, std::size_t bytes) noexcept;

// Fixes glibc malloc's mmap threshold at 32 MiB and its trim threshold at 64 MiB, the most
// its dynamic rule would raise them to (it raises them to the size of each mapped block of up
// to 32 MiB that is freed; with the large blocks mapped here, few such frees happen). Below
// them freed blocks stay in the heap and are reused, so a step's temporaries are not mapped
// and faulted in anew at every step. Process-wide; runtime::Context calls it once at start.
// A hint: an allocator that ignores or refuses it (a sanitizer's, one preloaded) changes
// speed only, so the call then does nothing.
void host_heap_policy();

}  // namespace lockstep
