// The AVX-512 vector trait (16 floats, AVX-512F with lane masks), for the *_avx512.cpp
// translation units only (CMake's lockstep_module compiles them with LOCKSTEP_AVX512_FLAGS;
// this header refuses any other TU). Members and lane types: runtime/simd.hpp (docs/design.md
// section 2); this trait is `masked`: it also has the masked loads, stores and arithmetic.
// Determinism contract: each member is the one AVX-512 instruction of the IEEE operation the
// Scalar trait performs (vfmadd for fma, a mask blend for sel); a masked operation does that
// operation in the mask's lanes and only moves bits in the others, so a kernel over it returns
// the scalar path's bits.
#pragma once

#if !defined(__AVX512F__)
#error \
    "runtime/simd_avx512.hpp is for *_avx512.cpp files (compiled with LOCKSTEP_AVX512_FLAGS) only"
#endif

#include <immintrin.h>

#include <cstdint>

#include "runtime/simd.hpp"
#include "runtime/transpose_avx512.hpp"

namespace lockstep::simd {
namespace {

struct Avx512 {
  static constexpr int W = 16;
  static constexpr bool masked = true;
  using reg = __m512;
  using ireg = __m512i;
  using mask = __mmask16;

  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg neg_zero() { return _mm512_set1_ps(-0.0f); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm512_storeu_ps(p, x); }
  // lanes(n): lanes [0, n), 0 <= n < 16; all(): every lane; any(m): some lane.
  static mask lanes(std::int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static mask all() { return __mmask16(0xFFFF); }
  static bool any(mask m) { return m != 0; }
  // Masked: lanes past n are neither read (no fault past the array) nor written.
  static reg load_n(const float* p, std::int64_t n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
  static void store_n(float* p, reg x, std::int64_t n) { _mm512_mask_storeu_ps(p, lanes(n), x); }
  static reg load_partial(const float* p, int n) {
    return _mm512_mask_loadu_ps(neg_zero(), lanes(n), p);
  }
  static void store_partial(float* p, reg x, int n) { _mm512_mask_storeu_ps(p, lanes(n), x); }

  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  static reg neg(reg a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(int32_t(0x80000000u))));
  }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static mask lt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static mask le(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static mask gt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static mask ge(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static mask eq(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static mask ne(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }

  static ireg iset1(std::int32_t x) { return _mm512_set1_epi32(x); }
  static ireg iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static ireg iadd(ireg a, ireg b) { return _mm512_add_epi32(a, b); }
  static ireg isub(ireg a, ireg b) { return _mm512_sub_epi32(a, b); }
  static ireg iand(ireg a, ireg b) { return _mm512_and_si512(a, b); }
  static ireg ior(ireg a, ireg b) { return _mm512_or_si512(a, b); }
  static ireg ixor(ireg a, ireg b) { return _mm512_xor_si512(a, b); }
  static mask ieq(ireg a, ireg b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static mask ige(ireg a, ireg b) { return _mm512_cmpge_epi32_mask(a, b); }
  template <int N>
  static ireg shl(ireg a) {
    return _mm512_slli_epi32(a, N);
  }
  template <int N>
  static ireg sra(ireg a) {
    return _mm512_srai_epi32(a, N);
  }
  static ireg as_int(reg a) { return _mm512_castps_si512(a); }
  static reg as_float(ireg a) { return _mm512_castsi512_ps(a); }
  static reg to_float(ireg a) { return _mm512_cvtepi32_ps(a); }
  static reg sel(mask m, reg a, reg b) { return _mm512_mask_blend_ps(m, b, a); }
  static mask mand(mask a, mask b) { return __mmask16(a & b); }
  static mask mor(mask a, mask b) { return __mmask16(a | b); }

  // Masked forms: maskz_* give +0.0 outside m, mask_* keep src (mask3_fma: c) outside m.
  static reg maskz_loadu(mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void mask_storeu(float* p, mask m, reg x) { _mm512_mask_storeu_ps(p, m, x); }
  static ireg maskz_iloadu(mask m, const void* p) { return _mm512_maskz_loadu_epi32(m, p); }
  // a > b ? a : b per lane (vmaxps: b when either is NaN or both are zeros).
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg mask_max(reg src, mask m, reg a, reg b) { return _mm512_mask_max_ps(src, m, a, b); }
  static reg mask_add(reg src, mask m, reg a, reg b) { return _mm512_mask_add_ps(src, m, a, b); }
  static reg mask3_fma(reg a, reg b, reg c, mask m) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
  static reg maskz_mul(mask m, reg a, reg b) { return _mm512_maskz_mul_ps(m, a, b); }
  static reg maskz_div(mask m, reg a, reg b) { return _mm512_maskz_div_ps(m, a, b); }
  static mask mask_ieq(mask m, ireg a, ireg b) { return _mm512_mask_cmpeq_epi32_mask(m, a, b); }

  static void transpose(const float* src, std::int64_t lds, float* dst, std::int64_t ldd) {
    transpose16_avx512(src, lds, dst, ldd);
  }
};

}  // namespace
}  // namespace lockstep::simd
