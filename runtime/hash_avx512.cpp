// XXH3-64 compiled with AVX-512: xxHash's header-only mode (XXH_INLINE_ALL) makes every xxHash
// function and type static to this file, so nothing clashes with libxxhash's symbols, and
// this file's XXH3_state_t (allocated, used and freed only here) need not match the
// library's. Same value as XXH3_64bits on every ISA path (xxHash's guarantee;
// tests/unit/test_hash.cpp checks it). Reached only through runtime/hash.cpp's run-time
// dispatch (best_isa()); built with LOCKSTEP_AVX512_FLAGS like every *_avx512.cpp.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <new>

#include "runtime/hash.hpp"

#if XXH_VECTOR != XXH_AVX512
#error "runtime/hash_avx512.cpp must be compiled with the AVX-512 flags (LOCKSTEP_AVX512_FLAGS)"
#endif

namespace lockstep::detail {
namespace {

std::uint64_t avx512_hash(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}
void* avx512_create() {
  XXH3_state_t* s = XXH3_createState();
  if (!s) throw std::bad_alloc();
  if (XXH3_64bits_reset(s) != XXH_OK) {
    XXH3_freeState(s);
    throw std::bad_alloc();
  }
  return s;
}
void avx512_destroy(void* state) {
  XXH3_freeState(static_cast<XXH3_state_t*>(state));
}
void avx512_update(void* state, const void* data, std::size_t bytes) {
  // XXH3_64bits_update fails only for a null state or (null, nonzero) input: a caller bug.
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);
}
std::uint64_t avx512_digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

}  // namespace

const Xxh3Impl& xxh3_avx512() {
  static const Xxh3Impl impl{"avx512",       avx512_hash,   avx512_create,
                             avx512_destroy, avx512_update, avx512_digest};
  return impl;
}

}  // namespace lockstep::detail
