// The AVX-512 instantiation of runtime/philox_batch_impl.hpp (compiled with AVX-512 flags).
#include <algorithm>

#include "runtime/philox_batch.hpp"
#include "runtime/philox_batch_impl.hpp"

namespace lockstep::philox_detail {

void keep_mask_avx512(std::uint64_t seed, std::uint64_t stream, std::int64_t first, std::int64_t n,
                      std::uint32_t thr, std::uint8_t* keep) {
  keep_mask_impl(seed, stream, first, n, thr, keep);
}

}  // namespace lockstep::philox_detail
