// Private to model/attn_rows*.cpp: the causal softmax row kernels, written once and compiled per
// ISA path (attn_rows.cpp: generic; attn_rows_avx2.cpp, attn_rows_avx512.cpp: with FMA and wider
// vectors). Only IEEE basic operations (* / - + fma, compare-and-select) in a fixed order per
// row, so every path returns the bits of the literal per-row loops of model/kernels/attn_rows.hpp.
// Everything lives in an anonymous namespace (one private copy per TU, no ODR clash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/kernels/attn_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"
#include "runtime/transcendental.hpp"
#if defined(__AVX512F__)
#include <immintrin.h>

#include "runtime/transpose_avx512.hpp"
#endif

namespace lockstep::attn_detail {
namespace {

constexpr int kG = 8;  // rows advanced together (independent chains overlap)

// Binary counters of DESIGN.md section 2 for kG rows (the csum tree over block leaves).
using Counters = csum_detail::RowCounters<kG>;

// Rows i0 .. i0+kG-1 of the causal pattern: row i0+r has length i0+r+1. out[r] = csum (Dot =
// false: of a) or cdot (Dot = true: of a, b) over the row's prefix, block B: the bits of
// lockstep::csum / lockstep::cdot (chains from -0.0, same leaves, same tree).
template <bool Dot>
void causal_group_reduce(const float* a, const float* b, std::int64_t ld, std::int64_t i0, int B,
                         float* out) {
  Counters c;
  const std::int64_t maxlen = i0 + kG;
  for (std::int64_t lo = 0; lo < maxlen; lo += B) {
    const std::int64_t hi = std::min<std::int64_t>(maxlen, lo + B);
    const std::int64_t common = std::max(lo, std::min<std::int64_t>(hi, i0 + 1));
    float acc[kG];
    for (int r = 0; r < kG; ++r) acc[r] = kAdditiveIdentity;
    for (std::int64_t k = lo; k < common; ++k)
      for (int r = 0; r < kG; ++r) {
        if constexpr (Dot)
          acc[r] = std::fma(a[r * ld + k], b[r * ld + k], acc[r]);
        else
          acc[r] = acc[r] + a[r * ld + k];
      }
    for (int r = 0; r < kG; ++r) {
      const std::int64_t end = std::min<std::int64_t>(hi, i0 + r + 1);
      for (std::int64_t k = common; k < end; ++k) {
        if constexpr (Dot)
          acc[r] = std::fma(a[r * ld + k], b[r * ld + k], acc[r]);
        else
          acc[r] = acc[r] + a[r * ld + k];
      }
      if (i0 + r + 1 > lo) c.push(r, acc[r]);
    }
  }
  for (int r = 0; r < kG; ++r) out[r] = c.result(r);
}

#if defined(__AVX512F__)
// The same sums for 16 rows i0 .. i0+15 (a, b point at row i0) with the rows in the lanes of
// a vector (the AVX-512 path; i0 and B multiples of 16, i0 + 16 <= the row stride ld): 16 x 16
// blocks are transposed so that step k of every row's chain is one (masked) vector add or
// fma, in increasing k from -0.0 per leaf, lanes past their row's end left unchanged. With
// i0 and B multiples of 16 every leaf starts at or before i0, so every lane (row) has the same
// leaves, merged by the binary counter of csum_counter.hpp on vectors: each lane is exactly
// the scalar row's sum.
template <bool Dot>
void causal_group16_reduce(const float* a, const float* b, std::int64_t ld, std::int64_t i0,
                           int B, float* out) {
  const std::int64_t maxlen = i0 + 16;
  alignas(64) float ta[16 * 16], tb[16 * 16];
  __m512 value[64];
  std::int64_t weight[64];
  int n = 0;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::int64_t lo = 0; lo < maxlen; lo += B) {
    const std::int64_t hi = std::min<std::int64_t>(maxlen, lo + B);
    __m512 acc = _mm512_set1_ps(kAdditiveIdentity);
    for (std::int64_t k0 = lo; k0 < hi; k0 += 16) {
      simd::transpose16_avx512(a + k0, ld, ta, 16);
      if constexpr (Dot) simd::transpose16_avx512(b + k0, ld, tb, 16);
      for (int kk = 0; kk < 16; ++kk) {
        // lane r takes step k while k <= i0 + r, i.e. r >= k - i0
        const std::int64_t first = k0 + kk - i0;
        const __mmask16 m = first <= 0 ? __mmask16(0xFFFF)
                                       : _mm512_cmpge_epi32_mask(
                                             lane, _mm512_set1_epi32(static_cast<int>(first)));
        const __m512 x = _mm512_load_ps(ta + kk * 16);
        if constexpr (Dot)
          acc = _mm512_mask3_fmadd_ps(x, _mm512_load_ps(tb + kk * 16), acc, m);
        else
          acc = _mm512_mask_add_ps(acc, m, acc, x);
      }
    }
    std::int64_t w = 1;
    while (n > 0 && weight[n - 1] == w) acc = _mm512_add_ps(value[--n], acc), w *= 2;
    value[n] = acc, weight[n++] = w;
  }
  __m512 acc = value[n - 1];  // fold from the right
  for (int i = n - 2; i >= 0; --i) acc = _mm512_add_ps(value[i], acc);
  _mm512_storeu_ps(out, acc);
}
#endif

// max over s[0..n) by m = s[j] > m ? s[j] : m from m = s[0]; lanes keep the same semantics up
// to the sign of a zero maximum (see attn_rows.hpp for why that sign never matters).
inline float row_max(const float* s, std::int64_t n) {
  constexpr int L = 16;
  float lane[L];
  for (int l = 0; l < L; ++l) lane[l] = s[0];
  std::int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; ++l) lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
  float m = lane[0];
  for (int l = 1; l < L; ++l) m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

#if defined(__AVX512F__)
// Lanes [0, k) of a 16-lane mask (0 < k <= 16).
inline __mmask16 first_lanes(std::int64_t k) {
  return static_cast<__mmask16>(k >= 16 ? 0xFFFFu : (1u << k) - 1u);
}
// s[j] = s[j] * scale over [0, n) and the max of the scaled row, in one pass: row_max's lanes
// (vmaxps(v, lane) is exactly v > lane ? v : lane), the tail of fewer than 16 entries joining
// the lanes under a mask instead of the sequential scan (the same maximum up to the sign of a
// zero maximum, which attn_rows.hpp shows never changes P).
inline float scale_row_max(float* s, std::int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 lane = _mm512_set1_ps(s[0] * scale);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + j), vs);
    _mm512_storeu_ps(s + j, v);
    lane = _mm512_max_ps(v, lane);
  }
  if (j < n) {
    const __mmask16 m = first_lanes(n - j);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vs);
    _mm512_mask_storeu_ps(s + j, m, v);
    lane = _mm512_mask_max_ps(lane, m, v, lane);
  }
  alignas(64) float l[16];
  _mm512_store_ps(l, lane);
  float mx = l[0];
  for (int k = 1; k < 16; ++k) mx = l[k] > mx ? l[k] : mx;
  return mx;
}
// Stores v's lanes [0, C - j) at s + j (all 16 when they fit).
inline void store_upto(float* s, std::int64_t j, std::int64_t C, __m512 v) {
  if (j + 16 <= C)
    _mm512_storeu_ps(s + j, v);
  else
    _mm512_mask_storeu_ps(s + j, first_lanes(C - j), v);
}
// s[j, j + 16) = op(mask, j) for the 16-lane blocks of [0, n) (the mask selects the lanes
// below n; a partial last block's lanes past n must come out +0.0), +0.0 stored over [n, C).
template <class Op>
inline void row_map_then_zero(float* s, std::int64_t n, std::int64_t C, Op op) {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, op(0xFFFF, j));
  if (j < n) {
    store_upto(s, j, C, op(first_lanes(n - j), j));
    j += 16;
  }
  for (; j < C; j += 16) store_upto(s, j, C, _mm512_setzero_ps());
}
#endif

// Softmax row i before its sum: scale, subtract the row max, exp (in place, n = i + 1).
inline void softmax_row_pre(const KernelCtx& ctx1, float* s, std::int64_t n, float scale) {
#if defined(__AVX512F__)
  const float mx = scale_row_max(s, n, scale);
#else
  for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
  const float mx = row_max(s, n);
#endif
  math::exp_shifted(ctx1, s, mx, s, n);
}
// ... and after it: divide by the sum, zero the masked tail.
inline void softmax_row_post(float* s, std::int64_t n, std::int64_t C, float sum) {
#if defined(__AVX512F__)
  const __m512 vd = _mm512_set1_ps(sum);
  row_map_then_zero(s, n, C, [&](__mmask16 m, std::int64_t j) {
    return _mm512_maskz_div_ps(m, _mm512_maskz_loadu_ps(m, s + j), vd);
  });
#else
  for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / sum;
  std::fill(s + n, s + C, 0.0f);
#endif
}
// Softmax backward row: g = (p * (g - dot)) * scale, masked tail zeroed.
inline void softmax_backward_row_post(const float* pr, float* g, std::int64_t n, std::int64_t C,
                                      float d, float scale) {
#if defined(__AVX512F__)
  const __m512 vd = _mm512_set1_ps(d), vs = _mm512_set1_ps(scale);
  row_map_then_zero(g, n, C, [&](__mmask16 m, std::int64_t j) {
    const __m512 t = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, g + j), vd);
    return _mm512_maskz_mul_ps(m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, pr + j), t), vs);
  });
#else
  for (std::int64_t j = 0; j < n; ++j) g[j] = (pr[j] * (g[j] - d)) * scale;
  std::fill(g + n, g + C, 0.0f);
#endif
}
// Whether rows [i, i + 16) can take causal_group16_reduce.
inline bool group16_ok(std::int64_t i, std::int64_t C, int B) {
#if defined(__AVX512F__)
  return i % 16 == 0 && B % 16 == 0 && i + 16 <= C;
#else
  (void)i, (void)C, (void)B;
  return false;
#endif
}

void softmax_rows_impl(const KernelCtx& ctx1, float* S, std::int64_t C, std::int64_t r0,
                       std::int64_t r1, float scale) {
  const int B = ctx1.reduce_block;
  std::int64_t i = r0;
  while (i < r1) {
    float sum[16];
    int rows = 0;
    if (i + 16 <= r1 && group16_ok(i, C, B)) {
      rows = 16;
      for (int r = 0; r < rows; ++r) softmax_row_pre(ctx1, S + (i + r) * C, i + r + 1, scale);
#if defined(__AVX512F__)
      causal_group16_reduce<false>(S + i * C, nullptr, C, i, B, sum);
#endif
    } else if (i + kG <= r1) {
      rows = kG;
      for (int r = 0; r < rows; ++r) softmax_row_pre(ctx1, S + (i + r) * C, i + r + 1, scale);
      causal_group_reduce<false>(S + i * C, nullptr, C, i, B, sum);
    } else {
      rows = 1;
      softmax_row_pre(ctx1, S + i * C, i + 1, scale);
      sum[0] = csum(S + i * C, i + 1, B);
    }
    for (int r = 0; r < rows; ++r) softmax_row_post(S + (i + r) * C, i + r + 1, C, sum[r]);
    i += rows;
  }
}

void softmax_backward_rows_impl(const KernelCtx& ctx1, const float* P, float* G, std::int64_t C,
                                std::int64_t r0, std::int64_t r1, float scale) {
  const int B = ctx1.reduce_block;
  std::int64_t i = r0;
  while (i < r1) {
    float dot[16];
    int rows = 0;
    if (i + 16 <= r1 && group16_ok(i, C, B)) {
      rows = 16;
#if defined(__AVX512F__)
      causal_group16_reduce<true>(P + i * C, G + i * C, C, i, B, dot);
#endif
    } else if (i + kG <= r1) {
      rows = kG;
      causal_group_reduce<true>(P + i * C, G + i * C, C, i, B, dot);
    } else {
      rows = 1;
      dot[0] = cdot(P + i * C, G + i * C, i + 1, B);
    }
    for (int r = 0; r < rows; ++r)
      softmax_backward_row_post(P + (i + r) * C, G + (i + r) * C, i + r + 1, C, dot[r], scale);
    i += rows;
  }
}

// The exact-mode scans (model/kernels/attn_rows.hpp): whether some y[c], c < n, has (bits & mask) ==
// value, tested on the integer bits so that the generic loop vectorizes; on AVX-512 one masked
// 16-lane compare per 16 floats.
inline bool row_has_bits(const float* y, std::int64_t n, std::uint32_t mask,
                         std::uint32_t value) {
#if defined(__AVX512F__)
  const __m512i vm = _mm512_set1_epi32(static_cast<int>(mask));
  const __m512i vv = _mm512_set1_epi32(static_cast<int>(value));
  __mmask16 hit = 0;
  for (std::int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = c + 16 <= n ? 0xffff : static_cast<__mmask16>((1u << (n - c)) - 1u);
    const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, y + c), vm);
    hit |= _mm512_mask_cmpeq_epi32_mask(m, v, vv);
  }
  return hit != 0;
#else
  std::uint32_t hit = 0;
  for (std::int64_t c = 0; c < n; ++c) {
    std::uint32_t u;
    std::memcpy(&u, y + c, 4);
    hit |= (u & mask) == value;
  }
  return hit != 0;
#endif
}

// Inf and NaN have every exponent bit set; +-0.0 has every bit but the sign clear.
bool rows_all_finite_impl(const float* X, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r)
    if (row_has_bits(X + r * ld, n, 0x7f800000u, 0x7f800000u)) return false;
  return true;
}

std::int64_t first_row_with_zero_impl(const float* Y, std::int64_t r0, std::int64_t r1,
                                      std::int64_t n, std::int64_t ld) {
  for (std::int64_t r = r0; r < r1; ++r)
    if (row_has_bits(Y + r * ld, n, 0x7fffffffu, 0u)) return r;
  return r1;
}

}  // namespace
}  // namespace lockstep::attn_detail
