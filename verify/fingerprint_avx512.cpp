// AVX-512 (F + DQ) version of the fingerprint's inner sum: mix64_v(key ^ i, bits_i) for
// consecutive logical indices i, added mod 2^64, for both fingerprint versions. Integer
// addition is associative and commutative, so any split of the index range gives exactly the
// scalar sum; this kernel uses that twice:
//  - two independent 8-lane vector streams (16 indices per block) run on the vector ports,
//    which vpmullq (3 uops) and the 64-bit shifts saturate;
//  - a third, scalar stream of kScalar<V> indices per block runs interleaved on the integer
//    ports (imul), which the vector code leaves idle: the vector stream takes the first
//    16 * blocks elements, the scalar stream the next kScalar * blocks; a plain 8-lane loop
//    and the scalar kernel finish the rest.
// Reached only through verify/fingerprint.cpp's run-time dispatch (best_isa()).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "verify/fingerprint.hpp"
#include "verify/fingerprint_kernel.hpp"

namespace lockstep::detail {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr std::uint64_t kMul1 = 0xbf58476d1ce4e5b9ull;
constexpr std::uint64_t kMul2 = 0x94d049bb133111ebull;
constexpr std::size_t kVec = 16;  // vector elements per block (2 streams x 8 lanes)
// Software prefetch distance in elements (8 KiB ahead, one cache line per block). The state
// is hashed once per step from memory, and this core's hardware prefetch alone kept v2 at
// ~0.8 ns per float on a 50 MB buffer, twice its in-cache ~0.4; 2-4K elements ahead brought
// it back to ~0.4-0.6 (measured; 8K was no better). Prefetching past the end is harmless.
constexpr std::size_t kPrefetch = 2048;
// Scalar elements per block, per version (measured: v1 gains ~10% from 3; v2, with half the
// multiplies, gains nothing from more than 1 -- 0 to 6 were tried).
template <FpVersion V>
constexpr std::size_t kScalar = V == FpVersion::v1 ? 3 : 1;

inline __m512i bcast(std::uint64_t v) {
  return _mm512_set1_epi64(static_cast<long long>(v));
}

// The splitmix64 finalizer f of z ^ extra (verify/fingerprint.hpp), 8 lanes.
inline __m512i finalize8(__m512i z, __m512i extra) {
  z = _mm512_xor_si512(z, extra);
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 30));
  z = _mm512_mullo_epi64(z, bcast(kMul1));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 27));
  z = _mm512_mullo_epi64(z, bcast(kMul2));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// 8 floats' bits as 64-bit lanes: zero-extended (v1), or in the high halves, i.e. already
// shifted left by 32 (v2; a masked dword permute on the shuffle port instead of a shift on
// the port the multiplies need).
template <FpVersion V>
inline __m512i load_bits(const float* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (V == FpVersion::v1) {
    return _mm512_cvtepu32_epi64(raw);
  } else {
    const __m512i odd = _mm512_setr_epi32(0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7);
    return _mm512_maskz_permutexvar_epi32(0xAAAA, odd, _mm512_castsi256_si512(raw));
  }
}

// mix64_v(a, bits) for 8 lanes, `bits` as load_bits<V> returns them.
template <FpVersion V>
inline __m512i mix8(__m512i a, __m512i bits) {
  if constexpr (V == FpVersion::v1)
    return finalize8(finalize8(_mm512_add_epi64(a, bcast(kGolden)), _mm512_setzero_si512()), bits);
  else
    return finalize8(a, bits);
}

// One scalar term. The empty asm keeps the value in a general register, so the compiler
// cannot turn the scalar stream back into vector code (which would defeat its purpose).
template <FpVersion V>
inline std::uint64_t scalar_term(std::uint64_t key, std::uint64_t i, const float* p) {
  std::uint32_t u;
  std::memcpy(&u, p, sizeof u);
  std::uint64_t a = (key ^ i);
  asm("" : "+r"(a));
  return fingerprint_mix(V, a, u);
}

template <FpVersion V>
std::uint64_t sum_avx512(std::uint64_t key, const float* data, std::size_t n, std::uint64_t first) {
  constexpr std::size_t kS = kScalar<V>;
  const __m512i vkey = bcast(key);
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const std::size_t blocks = n / (kVec + kS);
  const std::size_t scalar_begin = blocks * kVec;  // the scalar stream's first element

  __m512i idx0 = _mm512_add_epi64(bcast(first), lanes);
  __m512i idx1 = _mm512_add_epi64(bcast(first + 8), lanes);
  const __m512i step = bcast(kVec);
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
  std::uint64_t s[kS] = {};
  const float* sp = data + scalar_begin;
  std::uint64_t si = first + scalar_begin;
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* vp = data + b * kVec;
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(vp) +
                                               kPrefetch * sizeof(float)),
                 _MM_HINT_T0);
    acc0 = _mm512_add_epi64(acc0, mix8<V>(_mm512_xor_si512(vkey, idx0), load_bits<V>(vp)));
    acc1 = _mm512_add_epi64(acc1, mix8<V>(_mm512_xor_si512(vkey, idx1), load_bits<V>(vp + 8)));
    idx0 = _mm512_add_epi64(idx0, step);
    idx1 = _mm512_add_epi64(idx1, step);
    for (std::size_t k = 0; k < kS; ++k) s[k] += scalar_term<V>(key, si + k, sp + k);
    sp += kS;
    si += kS;
  }
  // The rest [blocks * (kVec + kS), n): 8 lanes at a time, then the scalar kernel.
  std::size_t j = blocks * (kVec + kS);
  __m512i idx = _mm512_add_epi64(bcast(first + j), lanes);
  for (; j + 8 <= n; j += 8) {
    acc0 = _mm512_add_epi64(acc0, mix8<V>(_mm512_xor_si512(vkey, idx), load_bits<V>(data + j)));
    idx = _mm512_add_epi64(idx, bcast(8));
  }
  alignas(64) std::uint64_t out[8];
  _mm512_store_si512(reinterpret_cast<__m512i*>(out), _mm512_add_epi64(acc0, acc1));
  std::uint64_t sum = 0;
  for (std::uint64_t x : s) sum += x;
  for (std::uint64_t l : out) sum += l;
  return sum + fingerprint_f32_scalar(V, key, data + j, n - j, first + j);
}

}  // namespace

std::uint64_t fingerprint_f32_avx512(FpVersion v, std::uint64_t key, const float* data,
                                     std::size_t n, std::uint64_t first) {
  return v == FpVersion::v1 ? sum_avx512<FpVersion::v1>(key, data, n, first)
                            : sum_avx512<FpVersion::v2>(key, data, n, first);
}

}  // namespace lockstep::detail
