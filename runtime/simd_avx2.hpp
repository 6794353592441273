// The AVX2 + FMA vector trait (8 floats), for the *_avx2.cpp translation units only (CMake's
// lockstep_module compiles them with LOCKSTEP_AVX2_FLAGS; this header refuses any other TU).
// Members and lane types: runtime/simd.hpp (docs/design.md section 2).
// Determinism contract: each member is the one AVX2 instruction of the IEEE operation the
// Scalar trait performs (vfmadd for fma, blendv for sel), so a kernel over it returns the
// scalar path's bits.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error "runtime/simd_avx2.hpp is for *_avx2.cpp files (compiled with LOCKSTEP_AVX2_FLAGS) only"
#endif

#include <immintrin.h>

#include <cstdint>

#include "runtime/simd.hpp"

namespace lockstep::simd {
namespace {

struct Avx2 {
  static constexpr int W = 8;
  static constexpr bool masked = false;
  using reg = __m256;
  using ireg = __m256i;
  using mask = __m256;  // all-ones lanes

  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg neg_zero() { return _mm256_set1_ps(-0.0f); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm256_storeu_ps(p, x); }
  // Through a padded copy: lanes past n are +0.0 and never stored back.
  static reg load_n(const float* p, std::int64_t n) {
    float b[W];
    for (int l = 0; l < W; ++l) b[l] = l < n ? p[l] : 0.0f;
    return _mm256_loadu_ps(b);
  }
  static void store_n(float* p, reg x, std::int64_t n) {
    float b[W];
    _mm256_storeu_ps(b, x);
    for (int l = 0; l < n; ++l) p[l] = b[l];
  }
  // Lanes [0, n) as an integer mask (all ones where the lane is in).
  static __m256i partial_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg load_partial(const float* p, int n) {
    const __m256i m = partial_mask(n);
    return _mm256_blendv_ps(neg_zero(), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_partial(float* p, reg x, int n) { _mm256_maskstore_ps(p, partial_mask(n), x); }

  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static reg neg(reg a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static mask lt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static mask eq(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }

  static ireg iset1(std::int32_t x) { return _mm256_set1_epi32(x); }
  static ireg iadd(ireg a, ireg b) { return _mm256_add_epi32(a, b); }
  static ireg isub(ireg a, ireg b) { return _mm256_sub_epi32(a, b); }
  static ireg iand(ireg a, ireg b) { return _mm256_and_si256(a, b); }
  static ireg ior(ireg a, ireg b) { return _mm256_or_si256(a, b); }
  static ireg ixor(ireg a, ireg b) { return _mm256_xor_si256(a, b); }
  static mask ieq(ireg a, ireg b) { return _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)); }
  template <int N>
  static ireg shl(ireg a) {
    return _mm256_slli_epi32(a, N);
  }
  template <int N>
  static ireg sra(ireg a) {
    return _mm256_srai_epi32(a, N);
  }
  static ireg as_int(reg a) { return _mm256_castps_si256(a); }
  static reg as_float(ireg a) { return _mm256_castsi256_ps(a); }
  static reg to_float(ireg a) { return _mm256_cvtepi32_ps(a); }
  static reg sel(mask m, reg a, reg b) { return _mm256_blendv_ps(b, a, m); }
  static mask mand(mask a, mask b) { return _mm256_and_ps(a, b); }
  static mask mor(mask a, mask b) { return _mm256_or_ps(a, b); }

  // 8 x 8 by unpacks, shuffles and 128-bit permutes (aligned stores).
  [[gnu::always_inline]] static void transpose(const float* src, std::int64_t lds, float* dst,
                                               std::int64_t ldd) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
      r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x20);
      t[4 + i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x31);
    }
    for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + i * ldd, t[i]);
  }
};

}  // namespace
}  // namespace lockstep::simd
