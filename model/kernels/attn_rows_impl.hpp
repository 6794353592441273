// Private to model/kernels/attn_rows*.cpp: the causal softmax row kernels, written once over a
// vector trait V of runtime/simd.hpp and instantiated per ISA path by LOCKSTEP_ATTN_ROWS_DEFINE
// (attn_rows.cpp: Scalar; attn_rows_avx2.cpp: Avx2; attn_rows_avx512.cpp: Avx512). A masked
// trait (AVX-512) takes the vector code below (16 rows in the lanes of a vector, masked row
// tails); the others take the generic loops, which the compiler vectorizes for the TU's ISA.
// Only IEEE basic operations (* / - + fma, compare-and-select) in a fixed order per row, so
// every path returns the bits of the literal per-row loops of model/kernels/attn_rows.hpp
// (docs/design.md section 2).
// Everything lives in an anonymous namespace (one private copy per TU, no ODR clash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/kernels/attn_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"
#include "runtime/row_max.hpp"
#include "runtime/simd.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep::attn_detail {
namespace {

constexpr int kG = 8;  // rows advanced together (independent chains overlap)

// Post-order counters of docs/design.md section 2 for kG rows (the csum tree over block
// leaves).
using Counters = csum_detail::RowCounters<kG>;

// The merges after each leaf of an n-leaf row: row n of a MergeTable (runtime/reduce_tree.hpp)
// that the dispatcher (attn_rows.cpp, no ISA flags) builds and passes in as a flat array: the
// table's own members are not used here, whose copies compiled with ISA flags could be the
// ones the linker keeps.
struct Schedules {
  const std::uint8_t* table;
  const std::uint8_t* row(std::int64_t n) const { return table + n * (n - 1) / 2; }
};

// Rows i0 .. i0+kG-1 of the causal pattern: row i0+r has length i0+r+1. out[r] = csum (Dot =
// false: of a) or cdot (Dot = true: of a, b) over the row's prefix, block B, tree mt: the bits
// of lockstep::csum / lockstep::cdot (chains from -0.0, same leaves, same tree).
template <bool Dot>
void causal_group_reduce(const float* a, const float* b, std::int64_t ld, std::int64_t i0, int B,
                         Schedules mt, float* out) {
  Counters c;
  const std::uint8_t* sched[kG];
  for (int r = 0; r < kG; ++r) sched[r] = mt.row((i0 + r + B) / B);
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
      if (i0 + r + 1 > lo) c.push(r, acc[r], sched[r][lo / B]);
    }
  }
  for (int r = 0; r < kG; ++r) out[r] = c.result(r);
}

// The same sums for 16 rows i0 .. i0+15 (a, b point at row i0) with the rows in the lanes of
// a vector (a masked trait V, 16 lanes; i0 and B multiples of 16, i0 + 16 <= the row stride
// ld): 16 x 16 blocks are transposed so that step k of every row's chain is one (masked)
// vector add or fma, in increasing k from -0.0 per leaf, lanes past their row's end left
// unchanged. With i0 and B multiples of 16 every leaf starts at or before i0, so every lane
// (row) has the same leaves, merged by the tree's schedule (mt) on vectors: each lane is exactly
// the scalar row's sum.
template <class V, bool Dot>
void causal_group16_reduce(const float* a, const float* b, std::int64_t ld, std::int64_t i0, int B,
                           Schedules mt, float* out) {
  static_assert(V::masked && V::W == 16);
  const std::int64_t maxlen = i0 + 16;
  alignas(64) float ta[16 * 16], tb[16 * 16];
  typename V::reg value[64];
  int n = 0;
  const std::uint8_t* sched = mt.row((maxlen + B - 1) / B);
  const typename V::ireg lane = V::iota();
  for (std::int64_t lo = 0; lo < maxlen; lo += B) {
    const std::int64_t hi = std::min<std::int64_t>(maxlen, lo + B);
    typename V::reg acc = V::set1(kAdditiveIdentity);
    for (std::int64_t k0 = lo; k0 < hi; k0 += 16) {
      V::transpose(a + k0, ld, ta, 16);
      if constexpr (Dot) V::transpose(b + k0, ld, tb, 16);
      for (int kk = 0; kk < 16; ++kk) {
        // lane r takes step k while k <= i0 + r, i.e. r >= k - i0
        const std::int64_t first = k0 + kk - i0;
        const typename V::mask m =
            first <= 0 ? V::all() : V::ige(lane, V::iset1(static_cast<int>(first)));
        const typename V::reg x = V::load(ta + kk * 16);
        if constexpr (Dot)
          acc = V::mask3_fma(x, V::load(tb + kk * 16), acc, m);
        else
          acc = V::mask_add(acc, m, acc, x);
      }
    }
    for (int k = sched[lo / B]; k > 0; --k) acc = V::add(value[--n], acc);
    value[n++] = acc;
  }
  V::storeu(out, value[0]);  // the schedule's last merge left the root
}

// max over s[0..n) by m = s[j] > m ? s[j] : m from m = s[0] (runtime/row_max.hpp); lanes keep
// the same semantics up to the sign of a zero maximum (see attn_rows.hpp for why that sign
// never matters).
using row_detail::row_max;

// The masked trait's row helpers (V::masked, V::W == 16).
// Lanes [0, k) of a mask (0 < k <= W).
template <class V>
inline typename V::mask first_lanes(std::int64_t k) {
  return k >= V::W ? V::all() : V::lanes(k);
}
// s[j] = s[j] * scale over [0, n) and the max of the scaled row, in one pass: row_max's lanes
// (vmaxps(v, lane) is exactly v > lane ? v : lane), the tail of fewer than 16 entries joining
// the lanes under a mask instead of the sequential scan (the same maximum up to the sign of a
// zero maximum, which attn_rows.hpp shows never changes P).
template <class V>
inline float scale_row_max(float* s, std::int64_t n, float scale) {
  constexpr int W = V::W;
  const typename V::reg vs = V::set1(scale);
  typename V::reg lane = V::set1(s[0] * scale);
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    const typename V::reg v = V::mul(V::loadu(s + j), vs);
    V::storeu(s + j, v);
    lane = V::max(v, lane);
  }
  if (j < n) {
    const typename V::mask m = first_lanes<V>(n - j);
    const typename V::reg v = V::mul(V::maskz_loadu(m, s + j), vs);
    V::mask_storeu(s + j, m, v);
    lane = V::mask_max(lane, m, v, lane);
  }
  alignas(64) float l[W];
  V::store(l, lane);
  float mx = l[0];
  for (int k = 1; k < W; ++k) mx = l[k] > mx ? l[k] : mx;
  return mx;
}
// Stores v's lanes [0, C - j) at s + j (all W when they fit).
template <class V>
inline void store_upto(float* s, std::int64_t j, std::int64_t C, typename V::reg v) {
  if (j + V::W <= C)
    V::storeu(s + j, v);
  else
    V::mask_storeu(s + j, first_lanes<V>(C - j), v);
}
// s[j, j + W) = op(mask, j) for the W-lane blocks of [0, n) (the mask selects the lanes
// below n; a partial last block's lanes past n must come out +0.0), +0.0 stored over [n, C).
template <class V, class Op>
inline void row_map_then_zero(float* s, std::int64_t n, std::int64_t C, Op op) {
  constexpr int W = V::W;
  std::int64_t j = 0;
  for (; j + W <= n; j += W) V::storeu(s + j, op(V::all(), j));
  if (j < n) {
    store_upto<V>(s, j, C, op(first_lanes<V>(n - j), j));
    j += W;
  }
  for (; j < C; j += W) store_upto<V>(s, j, C, V::zero());
}

// Softmax row i before its sum: scale, subtract the row max, exp (in place, n = i + 1).
template <class V>
inline void softmax_row_pre(const KernelCtx& ctx1, float* s, std::int64_t n, float scale) {
  float mx;
  if constexpr (V::masked) {
    mx = scale_row_max<V>(s, n, scale);
  } else {
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
    mx = row_max(s, n);
  }
  math::exp_shifted(ctx1, s, mx, s, n);
}
// ... and after it: divide by the sum, zero the masked tail.
template <class V>
inline void softmax_row_post(float* s, std::int64_t n, std::int64_t C, float sum) {
  if constexpr (V::masked) {
    const typename V::reg vd = V::set1(sum);
    row_map_then_zero<V>(s, n, C, [&](typename V::mask m, std::int64_t j) {
      return V::maskz_div(m, V::maskz_loadu(m, s + j), vd);
    });
  } else {
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / sum;
    std::fill(s + n, s + C, 0.0f);
  }
}
// Softmax backward row: g = (p * (g - dot)) * scale, masked tail zeroed.
template <class V>
inline void softmax_backward_row_post(const float* pr, float* g, std::int64_t n, std::int64_t C,
                                      float d, float scale) {
  if constexpr (V::masked) {
    const typename V::reg vd = V::set1(d), vs = V::set1(scale);
    row_map_then_zero<V>(g, n, C, [&](typename V::mask m, std::int64_t j) {
      const typename V::reg t = V::sub(V::maskz_loadu(m, g + j), vd);
      return V::maskz_mul(m, V::mul(V::maskz_loadu(m, pr + j), t), vs);
    });
  } else {
    for (std::int64_t j = 0; j < n; ++j) g[j] = (pr[j] * (g[j] - d)) * scale;
    std::fill(g + n, g + C, 0.0f);
  }
}
// Whether rows [i, i + 16) can take causal_group16_reduce (masked traits only).
template <class V>
inline bool group16_ok(std::int64_t i, std::int64_t C, int B) {
  if constexpr (V::masked) {
    return i % 16 == 0 && B % 16 == 0 && i + 16 <= C;
  } else {
    (void)i, (void)C, (void)B;
    return false;
  }
}

template <class V>
void softmax_rows_impl(const KernelCtx& ctx1, const std::uint8_t* table, float* S, std::int64_t C,
                       std::int64_t r0, std::int64_t r1, float scale) {
  const int B = ctx1.reduce_block;
  const Schedules mt{table};
  std::int64_t i = r0;
  while (i < r1) {
    float sum[16];
    int rows = 0;
    if (i + 16 <= r1 && group16_ok<V>(i, C, B)) {
      rows = 16;
      for (int r = 0; r < rows; ++r) softmax_row_pre<V>(ctx1, S + (i + r) * C, i + r + 1, scale);
      if constexpr (V::masked) causal_group16_reduce<V, false>(S + i * C, nullptr, C, i, B, mt, sum);
    } else if (i + kG <= r1) {
      rows = kG;
      for (int r = 0; r < rows; ++r) softmax_row_pre<V>(ctx1, S + (i + r) * C, i + r + 1, scale);
      causal_group_reduce<false>(S + i * C, nullptr, C, i, B, mt, sum);
    } else {
      rows = 1;
      softmax_row_pre<V>(ctx1, S + i * C, i + 1, scale);
      sum[0] = csum(S + i * C, i + 1, ctx1.rule());
    }
    for (int r = 0; r < rows; ++r) softmax_row_post<V>(S + (i + r) * C, i + r + 1, C, sum[r]);
    i += rows;
  }
}

template <class V>
void softmax_backward_rows_impl(const KernelCtx& ctx1, const float* P, float* G, std::int64_t C,
                                std::int64_t r0, std::int64_t r1, float scale,
                                const std::uint8_t* table) {
  const int B = ctx1.reduce_block;
  const Schedules mt{table};
  std::int64_t i = r0;
  while (i < r1) {
    float dot[16];
    int rows = 0;
    if (i + 16 <= r1 && group16_ok<V>(i, C, B)) {
      rows = 16;
      if constexpr (V::masked) causal_group16_reduce<V, true>(P + i * C, G + i * C, C, i, B, mt, dot);
    } else if (i + kG <= r1) {
      rows = kG;
      causal_group_reduce<true>(P + i * C, G + i * C, C, i, B, mt, dot);
    } else {
      rows = 1;
      dot[0] = cdot(P + i * C, G + i * C, i + 1, ctx1.rule());
    }
    for (int r = 0; r < rows; ++r)
      softmax_backward_row_post<V>(P + (i + r) * C, G + (i + r) * C, i + r + 1, C, dot[r], scale);
    i += rows;
  }
}

// The exact-mode scans (model/kernels/attn_rows.hpp): whether some y[c], c < n, has (bits &
// mask) == value, tested on the integer bits so that the generic loop vectorizes; on a masked
// trait one masked W-lane compare per W floats.
template <class V>
inline bool row_has_bits(const float* y, std::int64_t n, std::uint32_t mask, std::uint32_t value) {
  if constexpr (V::masked) {
    constexpr int W = V::W;
    const typename V::ireg vm = V::iset1(static_cast<int>(mask));
    const typename V::ireg vv = V::iset1(static_cast<int>(value));
    typename V::mask hit{};
    for (std::int64_t c = 0; c < n; c += W) {
      const typename V::mask m = c + W <= n ? V::all() : V::lanes(n - c);
      const typename V::ireg v = V::iand(V::maskz_iloadu(m, y + c), vm);
      hit = V::mor(hit, V::mask_ieq(m, v, vv));
    }
    return V::any(hit);
  } else {
    std::uint32_t hit = 0;
    for (std::int64_t c = 0; c < n; ++c) {
      std::uint32_t u;
      std::memcpy(&u, y + c, 4);
      hit |= (u & mask) == value;
    }
    return hit != 0;
  }
}

// Inf and NaN have every exponent bit set; +-0.0 has every bit but the sign clear.
template <class V>
bool rows_all_finite_impl(const float* X, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  for (std::int64_t r = 0; r < rows; ++r)
    if (row_has_bits<V>(X + r * ld, n, 0x7f800000u, 0x7f800000u)) return false;
  return true;
}

template <class V>
std::int64_t first_row_with_zero_impl(const float* Y, std::int64_t r0, std::int64_t r1,
                                      std::int64_t n, std::int64_t ld) {
  for (std::int64_t r = r0; r < r1; ++r)
    if (row_has_bits<V>(Y + r * ld, n, 0x7fffffffu, 0u)) return r;
  return r1;
}

}  // namespace
}  // namespace lockstep::attn_detail

// Defines the exported entry points of one ISA path over trait V (used once per attn_rows*.cpp,
// inside namespace lockstep::attn_detail).
#define LOCKSTEP_ATTN_ROWS_DEFINE(SUFFIX, V)                                                  \
  void softmax_causal_rows_##SUFFIX(const KernelCtx& ctx, float* S, std::int64_t C,           \
                                    std::int64_t r0, std::int64_t r1, float scale,            \
                                    const std::uint8_t* table) {                              \
    softmax_rows_impl<V>(ctx, table, S, C, r0, r1, scale);                                    \
  }                                                                                           \
  void softmax_backward_rows_##SUFFIX(const KernelCtx& ctx, const float* P, float* G,         \
                                      std::int64_t C, std::int64_t r0, std::int64_t r1,       \
                                      float scale, const std::uint8_t* table) {               \
    softmax_backward_rows_impl<V>(ctx, P, G, C, r0, r1, scale, table);                        \
  }                                                                                           \
  bool rows_all_finite_##SUFFIX(const float* X, std::int64_t rows, std::int64_t n,            \
                                std::int64_t ld) {                                            \
    return rows_all_finite_impl<V>(X, rows, n, ld);                                           \
  }                                                                                           \
  std::int64_t first_row_with_zero_##SUFFIX(const float* Y, std::int64_t r0, std::int64_t r1, \
                                            std::int64_t n, std::int64_t ld) {                \
    return first_row_with_zero_impl<V>(Y, r0, r1, n, ld);                                     \
  }
