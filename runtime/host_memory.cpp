#include "runtime/host_memory.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/error.hpp"

namespace lockstep {
namespace {

constexpr std::size_t kLine = 64;

// _SC_PAGESIZE is always defined on Linux (POSIX requires it); -1 cannot come back.
std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

[[noreturn]] void out_of_memory(std::size_t bytes, const char* call) {
  fail("out of memory allocating " + std::to_string(bytes) + " bytes (" + call + ": " +
           std::strerror(errno) + ")",
       "use a smaller model, batch or microbatch, or more ranks");
}

// Maps len + 2 MiB, then unmaps the head before the first 2 MiB boundary and the tail past
// len, so the block is exactly [p, p + len) and host_free can unmap it from (p, bytes) alone.
void* map_huge(std::size_t bytes) {
  const std::size_t len = round_up(bytes, page_size());
  const std::size_t span = len + kHostHugeBlock;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) out_of_memory(bytes, "mmap");
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = round_up(base, kHostHugeBlock);
  const std::size_t head = start - base, tail = span - head - len;
  // Unmapping part of a fresh private mapping cannot fail short of a kernel bug; a failure
  // would only leave address space unused, never touch the block.
  if (head) munmap(raw, head);
  if (tail) munmap(reinterpret_cast<void*>(start + len), tail);
  // The advice is a hint: a kernel built without transparent huge pages answers EINVAL, and
  // the block then runs on 4 KiB pages, as it would have through malloc.
  (void)madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

bool mapped(std::size_t bytes) {
  return kHostMapsLargeBlocks && bytes >= kHostHugeBlock;
}

}  // namespace

void* host_alloc(std::size_t bytes, bool zeroed) {
  // Sizes this close to SIZE_MAX (an overflowed element count) would wrap the rounding below.
  if (bytes > SIZE_MAX - 2 * kHostHugeBlock) {
    errno = ENOMEM;
    out_of_memory(bytes, "size");
  }
  if (mapped(bytes)) return map_huge(bytes);
  const std::size_t rounded = bytes == 0 ? kLine : round_up(bytes, kLine);
  void* p = std::aligned_alloc(kLine, rounded);
  if (p == nullptr) out_of_memory(bytes, "aligned_alloc");
  if (zeroed) std::memset(p, 0, rounded);
  return p;
}

void host_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  // munmap of a range host_alloc mapped fails only on a bad range, which the same (p, bytes)
  // rule excludes; a failure could only leak the block (and this cannot throw).
  if (mapped(bytes))
    munmap(p, round_up(bytes, page_size()));
  else
    std::free(p);
}

void host_heap_policy() {
  // AddressSanitizer's and MemorySanitizer's malloc ignore mallopt (answering 0).
  if (!kHostMapsLargeBlocks) return;
  // A refusal (another allocator preloaded) leaves glibc's own rule: speed only, no error.
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1) (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace lockstep
