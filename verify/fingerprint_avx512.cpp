// AVX-512 (F + DQ) version of the fingerprint's inner sum: eight lanes evaluate
// mix64(key ^ i, bits_i) for eight consecutive logical indices and add them mod 2^64;
// integer addition is associative, so the lane split gives exactly the scalar sum.
// Reached only through verify/fingerprint.cpp's run-time dispatch (best_isa()).
#include <immintrin.h>

#include <cstdint>

#include "verify/fingerprint.hpp"
#include "verify/fingerprint_kernel.hpp"

namespace lockstep::detail {
namespace {

inline __m512i finalize8(__m512i z) {
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 30));
  z = _mm512_mullo_epi64(z, _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ull)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 27));
  z = _mm512_mullo_epi64(z, _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebull)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

}  // namespace

std::uint64_t fingerprint_f32_avx512(std::uint64_t key, const float* data, std::size_t n,
                                     std::uint64_t first) {
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(0x9e3779b97f4a7c15ull));
  const __m512i vkey = _mm512_set1_epi64(static_cast<long long>(key));
  const __m512i step = _mm512_set1_epi64(8);
  __m512i idx = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first)),
                                 _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  __m512i acc = _mm512_setzero_si512();
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512i bits =
        _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + j)));
    __m512i z = finalize8(_mm512_add_epi64(_mm512_xor_si512(vkey, idx), golden));
    z = finalize8(_mm512_xor_si512(z, bits));
    acc = _mm512_add_epi64(acc, z);
    idx = _mm512_add_epi64(idx, step);
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(reinterpret_cast<__m512i*>(lanes), acc);
  std::uint64_t sum = 0;
  for (std::uint64_t l : lanes) sum += l;
  return sum + fingerprint_f32_scalar(key, data + j, n - j, first + j);
}

}  // namespace lockstep::detail
