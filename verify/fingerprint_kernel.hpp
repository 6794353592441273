// The inner loop of the float32 fingerprint sum (verify/fingerprint.hpp) per version and ISA
// path: sum over j < n of mix64_v(key ^ (first + j), bits(data[j])) mod 2^64. Every path
// returns exactly the scalar sum (integer addition is associative); dispatch is by
// best_isa().
#pragma once

#include <cstddef>
#include <cstdint>

#include "verify/fingerprint.hpp"

namespace lockstep::detail {

std::uint64_t fingerprint_f32_scalar(FpVersion v, std::uint64_t key, const float* data,
                                     std::size_t n, std::uint64_t first);
std::uint64_t fingerprint_f32_avx512(FpVersion v, std::uint64_t key, const float* data,
                                     std::size_t n, std::uint64_t first);
// The fastest path this CPU supports.
std::uint64_t fingerprint_f32(FpVersion v, std::uint64_t key, const float* data, std::size_t n,
                              std::uint64_t first);

}  // namespace lockstep::detail
