// Private to model/attn_rows*.cpp: the causal softmax row kernels, written once and compiled per
// ISA path (attn_rows.cpp: generic; attn_rows_avx2.cpp, attn_rows_avx512.cpp: with FMA and wider
// vectors). Only IEEE basic operations (* / - + fma, compare-and-select) in a fixed order per
// row, so every path returns the bits of the literal per-row loops of model/attn_rows.hpp.
// Everything lives in an anonymous namespace (one private copy per TU, no ODR clash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/attn_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"
#include "runtime/transcendental.hpp"

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

void softmax_rows_impl(const KernelCtx& ctx1, float* S, std::int64_t C, std::int64_t r0,
                       std::int64_t r1, float scale) {
  const int B = ctx1.reduce_block;
  std::int64_t i = r0;
  for (; i + kG <= r1; i += kG) {
    for (int r = 0; r < kG; ++r) {
      float* s = S + (i + r) * C;
      const std::int64_t n = i + r + 1;
      for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
      const float mx = row_max(s, n);
      for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] - mx;
      math::exp(ctx1, s, s, n);
    }
    float sum[kG];
    causal_group_reduce<false>(S + i * C, nullptr, C, i, B, sum);
    for (int r = 0; r < kG; ++r) {
      float* s = S + (i + r) * C;
      const std::int64_t n = i + r + 1;
      for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / sum[r];
      std::fill(s + n, s + C, 0.0f);
    }
  }
  for (; i < r1; ++i) {
    float* s = S + i * C;
    const std::int64_t n = i + 1;
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
    const float mx = row_max(s, n);
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] - mx;
    math::exp(ctx1, s, s, n);
    const float sum = csum(s, n, B);
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / sum;
    std::fill(s + n, s + C, 0.0f);
  }
}

void softmax_backward_rows_impl(const KernelCtx& ctx1, const float* P, float* G, std::int64_t C,
                                std::int64_t r0, std::int64_t r1, float scale) {
  const int B = ctx1.reduce_block;
  std::int64_t i = r0;
  float dot[kG];
  for (; i < r1; i += kG) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kG, r1 - i));
    if (rows == kG) {
      causal_group_reduce<true>(P + i * C, G + i * C, C, i, B, dot);
    } else {
      for (int r = 0; r < rows; ++r) dot[r] = cdot(P + (i + r) * C, G + (i + r) * C, i + r + 1, B);
    }
    for (int r = 0; r < rows; ++r) {
      const float* pr = P + (i + r) * C;
      float* g = G + (i + r) * C;
      const std::int64_t n = i + r + 1;
      const float d = dot[r];
      for (std::int64_t j = 0; j < n; ++j) g[j] = (pr[j] * (g[j] - d)) * scale;
      std::fill(g + n, g + C, 0.0f);
    }
  }
}

}  // namespace
}  // namespace lockstep::attn_detail
