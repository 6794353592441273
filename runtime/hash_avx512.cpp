// XXH3-64 compiled with AVX-512: xxHash's header-only mode (XXH_INLINE_ALL) makes every xxHash
// function and type static to this file, so nothing clashes with libxxhash's symbols, and
// this file's XXH3_state_t (allocated, used and freed only here) need not match the
// library's. Same value as XXH3_64bits on every ISA path (xxHash's guarantee;
// tests/unit/test_hash.cpp checks it). Reached only through runtime/hash.cpp's run-time
// dispatch (best_isa()); built with LOCKSTEP_AVX512_FLAGS like every *_avx512.cpp.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "runtime/hash.hpp"
#include "runtime/hash_xxh3_impl.hpp"

#if XXH_VECTOR != XXH_AVX512
#error "runtime/hash_avx512.cpp must be compiled with the AVX-512 flags (LOCKSTEP_AVX512_FLAGS)"
#endif

namespace lockstep::detail {

const Xxh3Impl& xxh3_avx512() {
  static const Xxh3Impl impl = make_xxh3_impl("avx512");
  return impl;
}

}  // namespace lockstep::detail
