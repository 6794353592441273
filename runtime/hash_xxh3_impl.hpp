// The Xxh3Impl (runtime/hash.hpp) over whichever XXH3 functions the including file sees:
// included after <xxhash.h> by runtime/hash.cpp (the system libxxhash) and by
// runtime/hash_avx512.cpp (xxHash's inline build, compiled with AVX-512), so one text serves
// both; everything here has internal linkage, bound to that file's XXH3.
// Determinism contract: as runtime/hash.hpp (XXH3-64 of the bytes, seed 0).
#pragma once

#include <new>

#include "runtime/hash.hpp"

namespace lockstep::detail {
namespace {

std::uint64_t impl_hash(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}
void* impl_create() {
  XXH3_state_t* s = XXH3_createState();
  if (!s) throw std::bad_alloc();
  if (XXH3_64bits_reset(s) != XXH_OK) {
    XXH3_freeState(s);
    throw std::bad_alloc();
  }
  return s;
}
void impl_destroy(void* state) {
  XXH3_freeState(static_cast<XXH3_state_t*>(state));
}
void impl_update(void* state, const void* data, std::size_t bytes) {
  // XXH3_64bits_update fails only for a null state or (null, nonzero) input: a caller bug.
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);
}
std::uint64_t impl_digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

// The implementation named `name` over this file's XXH3.
Xxh3Impl make_xxh3_impl(const char* name) {
  return {name, impl_hash, impl_create, impl_destroy, impl_update, impl_digest};
}

}  // namespace
}  // namespace lockstep::detail
