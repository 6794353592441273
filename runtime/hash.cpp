#include "runtime/hash.hpp"

#include <xxhash.h>

#include <cstdio>

namespace lockstep {

std::uint64_t xxh3_64(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace lockstep
