#include "verify/replica_hash.hpp"

#include "runtime/hash.hpp"
#include "runtime/isa.hpp"

namespace lockstep {

std::uint64_t replica_hash(const void* data, std::size_t bytes) {
  static const bool avx512 = best_isa() == Isa::avx512;
  return avx512 ? detail::replica_hash_avx512(data, bytes) : xxh3_64(data, bytes);
}

}  // namespace lockstep
