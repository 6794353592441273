// XXH3-64 compiled with AVX-512 (xxHash's header-only mode: every xxHash function is static
// to this file, so nothing clashes with libxxhash's symbols). Same value as XXH3_64bits on
// every ISA path (xxHash's own guarantee; tests/unit/test_fingerprint.cpp checks it).
// Reached only through verify/replica_hash.cpp's run-time dispatch (best_isa()).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "verify/replica_hash.hpp"

namespace lockstep::detail {

std::uint64_t replica_hash_avx512(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

}  // namespace lockstep::detail
