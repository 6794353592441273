#include "runtime/hash.hpp"

#include <xxhash.h>

#include <cstdio>

#include "runtime/hash_xxh3_impl.hpp"
#include "runtime/isa.hpp"

namespace lockstep {

namespace detail {

const Xxh3Impl& xxh3_libxxhash() {
  static const Xxh3Impl impl = make_xxh3_impl("libxxhash");
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
