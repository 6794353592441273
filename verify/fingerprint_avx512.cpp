// AVX-512 (F + DQ) version of the fingerprint's inner sum: mix64(key ^ i, bits_i) for
// consecutive logical indices i, added mod 2^64. Integer addition is associative and
// commutative, so any split of the index range gives exactly the scalar sum; this kernel
// uses that twice:
//  - two independent 8-lane vector streams (16 indices per block) run on the vector ports,
//    which vpmullq (3 uops) saturates;
//  - a third, scalar stream of 3 indices per block runs interleaved on the integer ports
//    (imul), which the vector code leaves idle: the vector stream takes the first
//    16 * blocks elements, the scalar stream the next 3 * blocks; a plain 8-lane loop and the
//    scalar kernel finish the rest. (~10% faster than one vector stream alone, measured.)
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
constexpr std::size_t kVec = 16;    // vector elements per block (2 streams x 8 lanes)
constexpr std::size_t kScalar = 3;  // scalar elements per block

inline __m512i bcast(std::uint64_t v) {
  return _mm512_set1_epi64(static_cast<long long>(v));
}

// The two splitmix64 finalizers of mix64(a, bits): f(f(a + golden) ^ bits), 8 lanes.
inline __m512i mix8(__m512i a, __m512i bits) {
  __m512i z = _mm512_add_epi64(a, bcast(kGolden));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 30));
  z = _mm512_mullo_epi64(z, bcast(kMul1));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 27));
  z = _mm512_mullo_epi64(z, bcast(kMul2));
  z = _mm512_ternarylogic_epi64(z, _mm512_srli_epi64(z, 31), bits, 0x96);  // z ^ z>>31 ^ bits
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 30));
  z = _mm512_mullo_epi64(z, bcast(kMul1));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 27));
  z = _mm512_mullo_epi64(z, bcast(kMul2));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

inline __m512i load_bits(const float* p) {
  return _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// One scalar term. The empty asm keeps the value in a general register, so the compiler
// cannot turn the scalar stream back into vector code (which would defeat its purpose).
inline std::uint64_t scalar_term(std::uint64_t key, std::uint64_t i, const float* p) {
  std::uint32_t u;
  std::memcpy(&u, p, sizeof u);
  std::uint64_t a = (key ^ i);
  asm("" : "+r"(a));
  return fingerprint_mix(a, u);
}

}  // namespace

std::uint64_t fingerprint_f32_avx512(std::uint64_t key, const float* data, std::size_t n,
                                     std::uint64_t first) {
  const __m512i vkey = bcast(key);
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const std::size_t blocks = n / (kVec + kScalar);
  const std::size_t scalar_begin = blocks * kVec;  // the scalar stream's first element

  __m512i idx0 = _mm512_add_epi64(bcast(first), lanes);
  __m512i idx1 = _mm512_add_epi64(bcast(first + 8), lanes);
  const __m512i step = bcast(kVec);
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
  std::uint64_t s0 = 0, s1 = 0, s2 = 0;
  const float* sp = data + scalar_begin;
  std::uint64_t si = first + scalar_begin;
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* vp = data + b * kVec;
    acc0 = _mm512_add_epi64(acc0, mix8(_mm512_xor_si512(vkey, idx0), load_bits(vp)));
    acc1 = _mm512_add_epi64(acc1, mix8(_mm512_xor_si512(vkey, idx1), load_bits(vp + 8)));
    idx0 = _mm512_add_epi64(idx0, step);
    idx1 = _mm512_add_epi64(idx1, step);
    s0 += scalar_term(key, si, sp);
    s1 += scalar_term(key, si + 1, sp + 1);
    s2 += scalar_term(key, si + 2, sp + 2);
    sp += kScalar;
    si += kScalar;
  }
  // The rest [blocks * (kVec + kScalar), n): 8 lanes at a time, then the scalar kernel.
  std::size_t j = blocks * (kVec + kScalar);
  __m512i idx = _mm512_add_epi64(bcast(first + j), lanes);
  for (; j + 8 <= n; j += 8) {
    acc0 = _mm512_add_epi64(acc0, mix8(_mm512_xor_si512(vkey, idx), load_bits(data + j)));
    idx = _mm512_add_epi64(idx, bcast(8));
  }
  alignas(64) std::uint64_t out[8];
  _mm512_store_si512(reinterpret_cast<__m512i*>(out), _mm512_add_epi64(acc0, acc1));
  std::uint64_t sum = s0 + s1 + s2;
  for (std::uint64_t l : out) sum += l;
  return sum + fingerprint_f32_scalar(key, data + j, n - j, first + j);
}

}  // namespace lockstep::detail
