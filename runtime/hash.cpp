#include "runtime/hash.hpp"

#include <xxhash.h>

#include <cstdio>
#include <new>

#include "runtime/isa.hpp"

namespace lockstep {

namespace detail {
namespace {

std::uint64_t lib_hash(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}
void* lib_create() {
  XXH3_state_t* s = XXH3_createState();
  if (!s) throw std::bad_alloc();
  if (XXH3_64bits_reset(s) != XXH_OK) {
    XXH3_freeState(s);
    throw std::bad_alloc();
  }
  return s;
}
void lib_destroy(void* state) {
  XXH3_freeState(static_cast<XXH3_state_t*>(state));
}
void lib_update(void* state, const void* data, std::size_t bytes) {
  // XXH3_64bits_update fails only for a null state or (null, nonzero) input: a caller bug.
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);
}
std::uint64_t lib_digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

}  // namespace

const Xxh3Impl& xxh3_libxxhash() {
  static const Xxh3Impl impl{"libxxhash", lib_hash,   lib_create,
                             lib_destroy, lib_update, lib_digest};
  return impl;
}

const Xxh3Impl& xxh3_dispatch() {
  static const Xxh3Impl& impl = best_isa() == Isa::avx512 ? xxh3_avx512() : xxh3_libxxhash();
  return impl;
}

}  // namespace detail

std::uint64_t xxh3_64(const void* data, std::size_t bytes) {
  return detail::xxh3_dispatch().hash(data, bytes);
}

Xxh3Stream::Xxh3Stream() : impl_(&detail::xxh3_dispatch()), state_(impl_->create()) {}
Xxh3Stream::~Xxh3Stream() {
  impl_->destroy(state_);
}
void Xxh3Stream::update(const void* data, std::size_t bytes) {
  impl_->update(state_, data, bytes);
}
std::uint64_t Xxh3Stream::digest() const {
  return impl_->digest(state_);
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace lockstep
