// AVX2 + FMA lane type (8 floats) for runtime/transcendental_impl.hpp; reached only through the
// dispatch in runtime/transcendental.cpp after isa_supported(Isa::avx2).
// Determinism contract: each lane operation is the single IEEE-rounded instruction the scalar
// lane type performs (vfmadd for fma), so results equal the scalar path bit for bit.
#include <immintrin.h>

#include <cstdint>

namespace lockstep::math::detail {
namespace {

struct M8 {
  __m256 v;
  friend M8 operator&(M8 a, M8 b) { return {_mm256_and_ps(a.v, b.v)}; }
  friend M8 operator|(M8 a, M8 b) { return {_mm256_or_ps(a.v, b.v)}; }
};

struct I8 {
  __m256i v;
  I8() = default;
  explicit I8(int32_t x) : v(_mm256_set1_epi32(x)) {}
  static I8 raw(__m256i x) {
    I8 r;
    r.v = x;
    return r;
  }
  friend I8 operator+(I8 a, I8 b) { return raw(_mm256_add_epi32(a.v, b.v)); }
  friend I8 operator-(I8 a, I8 b) { return raw(_mm256_sub_epi32(a.v, b.v)); }
  friend I8 operator&(I8 a, I8 b) { return raw(_mm256_and_si256(a.v, b.v)); }
  friend I8 operator|(I8 a, I8 b) { return raw(_mm256_or_si256(a.v, b.v)); }
  friend I8 operator^(I8 a, I8 b) { return raw(_mm256_xor_si256(a.v, b.v)); }
  friend M8 operator==(I8 a, I8 b) { return {_mm256_castsi256_ps(_mm256_cmpeq_epi32(a.v, b.v))}; }
};
template <int N>
inline I8 shl(I8 a) {
  return I8::raw(_mm256_slli_epi32(a.v, N));
}
template <int N>
inline I8 sra(I8 a) {
  return I8::raw(_mm256_srai_epi32(a.v, N));
}

struct F8 {
  using I = I8;
  using M = M8;
  __m256 v;
  F8() = default;
  F8(float x) : v(_mm256_set1_ps(x)) {}  // NOLINT: broadcast
  static F8 raw(__m256 x) {
    F8 r;
    r.v = x;
    return r;
  }
  friend F8 operator+(F8 a, F8 b) { return raw(_mm256_add_ps(a.v, b.v)); }
  friend F8 operator-(F8 a, F8 b) { return raw(_mm256_sub_ps(a.v, b.v)); }
  friend F8 operator-(F8 a) { return raw(_mm256_xor_ps(a.v, _mm256_set1_ps(-0.0f))); }
  friend F8 operator*(F8 a, F8 b) { return raw(_mm256_mul_ps(a.v, b.v)); }
  friend F8 operator/(F8 a, F8 b) { return raw(_mm256_div_ps(a.v, b.v)); }
  friend M8 operator<(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
  friend M8 operator<=(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LE_OQ)}; }
  friend M8 operator>(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
  friend M8 operator>=(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ)}; }
  friend M8 operator==(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_EQ_OQ)}; }
  friend M8 operator!=(F8 a, F8 b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_NEQ_UQ)}; }
};
inline F8 fma(F8 a, F8 b, F8 c) {
  return F8::raw(_mm256_fmadd_ps(a.v, b.v, c.v));
}
inline I8 as_int(F8 a) {
  return I8::raw(_mm256_castps_si256(a.v));
}
inline F8 as_float(I8 a) {
  return F8::raw(_mm256_castsi256_ps(a.v));
}
inline F8 to_float(I8 a) {
  return F8::raw(_mm256_cvtepi32_ps(a.v));
}
inline F8 sel(M8 m, F8 a, F8 b) {
  return F8::raw(_mm256_blendv_ps(b.v, a.v, m.v));
}
inline void store(float* p, F8 a) {
  _mm256_storeu_ps(p, a.v);
}

}  // namespace
}  // namespace lockstep::math::detail

#include "runtime/transcendental_impl.hpp"

namespace lockstep::math::detail {
namespace {
template <>
F8 load<F8>(const float* p) {
  return F8::raw(_mm256_loadu_ps(p));
}
}  // namespace

void run_avx2(Fn fn, const float* x, float* y, int64_t n) {
  run_lanes_<F8, 8>(fn, x, y, n);
}

void run_gelu_pair_avx2(const float* x, float* y, float* g, int64_t n) {
  run_gelu_pair_lanes_<F8, 8>(x, y, g, n);
}

void run_exp_shift_avx2(const float* x, float shift, float* y, int64_t n) {
  run_exp_shift_lanes_<F8, 8>(x, shift, y, n);
}

}  // namespace lockstep::math::detail
