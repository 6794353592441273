// AVX-512F lane type (16 floats) for runtime/transcendental_impl.hpp; reached only through the
// dispatch in runtime/transcendental.cpp after isa_supported(Isa::avx512).
// Determinism contract: each lane operation is the single IEEE-rounded instruction the scalar
// lane type performs (vfmadd for fma), so results equal the scalar path bit for bit.
// GCC 12 reports a false -Wmaybe-uninitialized inside avx512fintrin.h (_mm512_undefined_*).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace lockstep::math::detail {
namespace {

struct M16 {
  __mmask16 v;
  friend M16 operator&(M16 a, M16 b) { return {__mmask16(a.v & b.v)}; }
  friend M16 operator|(M16 a, M16 b) { return {__mmask16(a.v | b.v)}; }
};

struct I16 {
  __m512i v;
  I16() = default;
  explicit I16(int32_t x) : v(_mm512_set1_epi32(x)) {}
  static I16 raw(__m512i x) {
    I16 r;
    r.v = x;
    return r;
  }
  friend I16 operator+(I16 a, I16 b) { return raw(_mm512_add_epi32(a.v, b.v)); }
  friend I16 operator-(I16 a, I16 b) { return raw(_mm512_sub_epi32(a.v, b.v)); }
  friend I16 operator&(I16 a, I16 b) { return raw(_mm512_and_si512(a.v, b.v)); }
  friend I16 operator|(I16 a, I16 b) { return raw(_mm512_or_si512(a.v, b.v)); }
  friend I16 operator^(I16 a, I16 b) { return raw(_mm512_xor_si512(a.v, b.v)); }
  friend M16 operator==(I16 a, I16 b) { return {_mm512_cmpeq_epi32_mask(a.v, b.v)}; }
};
template <int N>
inline I16 shl(I16 a) {
  return I16::raw(_mm512_slli_epi32(a.v, N));
}
template <int N>
inline I16 sra(I16 a) {
  return I16::raw(_mm512_srai_epi32(a.v, N));
}

struct F16 {
  using I = I16;
  using M = M16;
  __m512 v;
  F16() = default;
  F16(float x) : v(_mm512_set1_ps(x)) {}  // NOLINT: broadcast
  static F16 raw(__m512 x) {
    F16 r;
    r.v = x;
    return r;
  }
  friend F16 operator+(F16 a, F16 b) { return raw(_mm512_add_ps(a.v, b.v)); }
  friend F16 operator-(F16 a, F16 b) { return raw(_mm512_sub_ps(a.v, b.v)); }
  friend F16 operator-(F16 a) {
    return raw(_mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(int32_t(0x80000000u)))));
  }
  friend F16 operator*(F16 a, F16 b) { return raw(_mm512_mul_ps(a.v, b.v)); }
  friend F16 operator/(F16 a, F16 b) { return raw(_mm512_div_ps(a.v, b.v)); }
  friend M16 operator<(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
  friend M16 operator<=(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LE_OQ)}; }
  friend M16 operator>(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
  friend M16 operator>=(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
  friend M16 operator==(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ)}; }
  friend M16 operator!=(F16 a, F16 b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_NEQ_UQ)}; }
};
inline F16 fma(F16 a, F16 b, F16 c) {
  return F16::raw(_mm512_fmadd_ps(a.v, b.v, c.v));
}
inline I16 as_int(F16 a) {
  return I16::raw(_mm512_castps_si512(a.v));
}
inline F16 as_float(I16 a) {
  return F16::raw(_mm512_castsi512_ps(a.v));
}
inline F16 to_float(I16 a) {
  return F16::raw(_mm512_cvtepi32_ps(a.v));
}
inline F16 sel(M16 m, F16 a, F16 b) {
  return F16::raw(_mm512_mask_blend_ps(m.v, b.v, a.v));
}
inline void store(float* p, F16 a) {
  _mm512_storeu_ps(p, a.v);
}

}  // namespace
}  // namespace lockstep::math::detail

#include "runtime/transcendental_impl.hpp"

namespace lockstep::math::detail {
namespace {
template <>
F16 load<F16>(const float* p) {
  return F16::raw(_mm512_loadu_ps(p));
}
// Masked: lanes past n are neither read (no fault past the array) nor written.
template <>
F16 load_n<F16, 16>(const float* p, int64_t n) {
  return F16::raw(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p));
}
template <>
void store_n<F16, 16>(float* p, F16 a, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), a.v);
}
}  // namespace

void run_avx512(Fn fn, const float* x, float* y, int64_t n) {
  run_lanes_<F16, 16>(fn, x, y, n);
}

void run_gelu_pair_avx512(const float* x, float* y, float* g, int64_t n) {
  run_gelu_pair_lanes_<F16, 16>(x, y, g, n);
}

void run_exp_shift_avx512(const float* x, float shift, float* y, int64_t n) {
  run_exp_shift_lanes_<F16, 16>(x, shift, y, n);
}

}  // namespace lockstep::math::detail
