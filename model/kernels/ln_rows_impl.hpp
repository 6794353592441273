// Private to model/kernels/ln_rows*.cpp: the LayerNorm row kernels, written once over a vector
// trait V of runtime/simd.hpp and instantiated per ISA path by LOCKSTEP_LN_ROWS_DEFINE
// (ln_rows.cpp: Sse2, baseline x86-64; ln_rows_avx2.cpp: Avx2; ln_rows_avx512.cpp: Avx512).
// Determinism contract: docs/design.md section 2 and model/kernels/ln_rows.hpp.
// Row sums run ACROSS rows: a group of kL = V::W rows (one vector register's lanes: 16 on
// AVX-512, 8 on AVX2, 4 on the baseline SSE2 path) is transposed into a scratch tile (element k
// of row r in lane r of vector k; the trait's register transposes, a plain loop for tails),
// held in GCC generic vectors of kL floats (simd::GnuVec), and each lane runs
// exactly its row's canonical sum (chains of B elements from -0.0 in order, leaves merged by
// the row tree's post-order schedule): the bits of lockstep::csum. Four block chains of a row advance together
// for overlap; the leaves are still pushed in block order. Element-wise passes run along
// features with the literal operations (no FMA: -ffp-contract=off, no reassociation), their
// vector body aligned to the output row. The fused backward also sums the parameter-gradient
// column chains of each token leaf in the same pass (csum_rows' leaves, rows in order).
// Everything lives in an anonymous namespace (one private copy per TU, no ODR clash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/kernels/ln_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/simd.hpp"

// vf values never cross a TU boundary (anonymous namespace, exported functions take pointers),
// so GCC's note that a vector wider than the TU's ISA "changes the ABI" would not apply (the
// header is private to ln_rows*.cpp, so the pragma covers only those TUs).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace lockstep::ln_detail {
namespace {

// Rows per group = the lanes of one vector register of the path, V::W (AVX-512: 16, AVX2: 8,
// SSE2: 4); the grouping never changes bits (each lane is one row's own computation).
template <class V>
using vf = typename simd::GnuVec<V::W>::type;

#define LN_INLINE inline __attribute__((always_inline))

template <class V>
LN_INLINE vf<V> splat(float a) {
  vf<V> v;
  for (int l = 0; l < V::W; ++l) v[l] = a;
  return v;
}

// The post-order counter of runtime/csum_counter.hpp, one lane per row (all rows of a group
// have the same length, so they push the same leaves with the same schedule).
template <class V>
struct LaneCounter {
  vf<V> value[64];
  int n = 0;
  LN_INLINE void push(vf<V> v, int merges) {
    for (int k = 0; k < merges; ++k) v = value[--n] + v;
    value[n++] = v;
  }
  LN_INLINE vf<V> result() const {
    if (n == 0) return splat<V>(kAdditiveIdentity);
    vf<V> acc = value[n - 1];
    for (int i = n - 2; i >= 0; --i) acc = value[i] + acc;
    return acc;
  }
};

// out[s] (s < NS) = per-lane csum over k in [0, n) of the terms f(k, terms) writes, block B,
// leaf l followed by merges[l] merges (the row tree's schedule). Four full blocks advance
// together (their chains are independent); leaves are pushed in order.
template <class V, int NS, class F>
LN_INLINE void lane_csum(std::int64_t n, int B, const std::uint8_t* merges, F f, vf<V>* out) {
  LaneCounter<V> c[NS];
  const vf<V> z = splat<V>(kAdditiveIdentity);
  std::int64_t lo = 0;
  for (; lo + 4 * std::int64_t{B} <= n; lo += 4 * std::int64_t{B}) {
    vf<V> a[4][NS];
    for (int j = 0; j < 4; ++j)
      for (int s = 0; s < NS; ++s) a[j][s] = z;
    for (std::int64_t o = 0; o < B; ++o)
      for (int j = 0; j < 4; ++j) {
        vf<V> t[NS];
        f(lo + j * std::int64_t{B} + o, t);
        for (int s = 0; s < NS; ++s) a[j][s] = a[j][s] + t[s];
      }
    for (int j = 0; j < 4; ++j)
      for (int s = 0; s < NS; ++s) c[s].push(a[j][s], merges[lo / B + j]);
  }
  for (; lo < n; lo += B) {
    const std::int64_t hi = std::min<std::int64_t>(n, lo + B);
    vf<V> a[NS];
    for (int s = 0; s < NS; ++s) a[s] = z;
    for (std::int64_t k = lo; k < hi; ++k) {
      vf<V> t[NS];
      f(k, t);
      for (int s = 0; s < NS; ++s) a[s] = a[s] + t[s];
    }
    for (int s = 0; s < NS; ++s) c[s].push(a[s], merges[lo / B]);
  }
  for (int s = 0; s < NS; ++s) out[s] = c[s].result();
}

// dst[k][r] = src[r*ld + k] for r < rows, +0.0 for r >= rows (lanes of missing rows are
// computed and discarded), k in [0, n): full groups by the trait's kL x kL register transposes
// (dst vector k0 + i = column k0 + i, lane j = row j), the rest by a plain loop.
template <class V>
void load_rows_transposed(const float* src, std::int64_t ld, int rows, std::int64_t n, vf<V>* dst) {
  constexpr int kL = V::W;
  std::int64_t k0 = 0;
  if (rows == kL)
    for (; k0 + kL <= n; k0 += kL)
      V::transpose(src + k0, ld, reinterpret_cast<float*>(dst + k0), kL);
  float* d = reinterpret_cast<float*>(dst);
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    for (std::int64_t k = k0; k < n; ++k) d[k * kL + r] = s[k];
  }
  for (int r = rows; r < kL; ++r)
    for (std::int64_t k = k0; k < n; ++k) d[k * kL + r] = 0.0f;
}

// Grow-only per-thread tile buffers (one set per TU, so per ISA path).
template <class V>
vf<V>* tile(int which, std::int64_t n) {
  static thread_local std::vector<vf<V>> buf[3];
  if (buf[which].size() < static_cast<std::size_t>(n))
    buf[which].resize(static_cast<std::size_t>(n));
  return buf[which].data();
}

// The row-range loops below carry `#pragma GCC ivdep`: their arrays never overlap (ops.hpp's
// aliasing rules; lw/lb are private accumulators), and with six streams GCC's run-time alias
// checks would otherwise fall back to scalar code. Vectorizing them along k keeps each
// element's operations as written.
// Elements before p's next 64-byte boundary (at most n): the row passes run [0, head) and
// [head, n) as two loops so the vector body's stores are aligned (std::vector buffers start
// 16 bytes past a page; split stores cost a third of the forward). Same operations per element.
LN_INLINE std::int64_t head_len(const void* p, std::int64_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % sizeof(float) != 0) return 0;
  return std::min<std::int64_t>(n, static_cast<std::int64_t>((64 - a % 64) % 64 / sizeof(float)));
}

LN_INLINE void residual_range(float* hw, const float* rr, std::int64_t k0, std::int64_t k1) {
#pragma GCC ivdep
  for (std::int64_t k = k0; k < k1; ++k) hw[k] = hw[k] + rr[k];
}

// xhat = (x - mean)*rstd; y = xhat*w + b.
LN_INLINE void forward_row_range(const float* xr, float m, float rs, const float* w, const float* b,
                                 float* xh, float* yr, std::int64_t k0, std::int64_t k1) {
#pragma GCC ivdep
  for (std::int64_t k = k0; k < k1; ++k) {
    const float c = (xr[k] - m) * rs;
    xh[k] = c;
    yr[k] = c * w[k] + b[k];
  }
}

// dx = (dy*w - (xhat*c2 + c1))*rstd, added to o when Acc.
template <bool Acc>
LN_INLINE void backward_row_range(const float* dr, const float* xh, const float* w, float c1,
                                  float c2, float rs, float* o, std::int64_t k0, std::int64_t k1) {
#pragma GCC ivdep
  for (std::int64_t k = k0; k < k1; ++k) {
    const float g = dr[k] * w[k];
    const float d = (g - (xh[k] * c2 + c1)) * rs;
    if constexpr (Acc)
      o[k] = o[k] + d;
    else
      o[k] = d;
  }
}

template <class V>
void forward_rows_impl(float* xw, const float* x, const float* res, std::int64_t r0,
                       std::int64_t r1, std::int64_t n, const float* w, const float* b, float eps,
                       const LnTrees& tr, float* xhat, float* rstd, float* y) {
  constexpr int kL = V::W;
  vf<V>* xt = tile<V>(0, n);
  const vf<V> fn = splat<V>(static_cast<float>(n));
  for (std::int64_t t0 = r0; t0 < r1; t0 += kL) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kL, r1 - t0));
    if (res) {
      float* hw = xw + t0 * n;
      const float* rr = res + t0 * n;
      const std::int64_t len = rows * n, h = head_len(hw, len);
      residual_range(hw, rr, 0, h);
      residual_range(hw, rr, h, len);
    }
    load_rows_transposed<V>(x + t0 * n, n, rows, n, xt);
    vf<V> sum, sq;
    lane_csum<V, 1>(
        n, tr.B, tr.row_merges, [xt](std::int64_t k, vf<V>* t) { t[0] = xt[k]; }, &sum);
    const vf<V> mean = sum / fn;
    lane_csum<V, 1>(
        n, tr.B, tr.row_merges,
        [xt, mean](std::int64_t k, vf<V>* t) {
          const vf<V> c = xt[k] - mean;
          t[0] = c * c;
        },
        &sq);
    const vf<V> var = sq / fn;
    for (int r = 0; r < rows; ++r) {
      const float m = mean[r];
      const float rs = 1.0f / std::sqrt(var[r] + eps);
      rstd[t0 + r] = rs;
      const float* xr = x + (t0 + r) * n;
      float* xh = xhat + (t0 + r) * n;
      float* yr = y + (t0 + r) * n;
      const std::int64_t h = head_len(yr, n);
      forward_row_range(xr, m, rs, w, b, xh, yr, 0, h);
      forward_row_range(xr, m, rs, w, b, xh, yr, h, n);
    }
  }
}

// The row statistics of the input gradient for rows [t0, t0 + rows) (one lane per row):
// c1 = csum(g)/n and c2 = csum(g*xhat)/n with g = dy*w; dt, xt: tiles of n vectors.
template <class V>
LN_INLINE void backward_group_stats(const float* dy, const float* xhat, const float* w,
                                    std::int64_t t0, int rows, std::int64_t n, const LnTrees& tr, vf<V>* dt,
                                    vf<V>* xt, vf<V> fn, vf<V>& c1v, vf<V>& c2v) {
  load_rows_transposed<V>(dy + t0 * n, n, rows, n, dt);
  load_rows_transposed<V>(xhat + t0 * n, n, rows, n, xt);
  vf<V> s[2];
  lane_csum<V, 2>(
      n, tr.B, tr.row_merges,
      [dt, xt, w](std::int64_t k, vf<V>* t) {
        const vf<V> g = dt[k] * w[k];
        t[0] = g;
        t[1] = g * xt[k];
      },
      s);
  c1v = s[0] / fn;
  c2v = s[1] / fn;
}

// Rows [r0, r1) of the backward in groups of kL: the group's row statistics, then per row
// row_fn(dy row, xhat row, dx row, c1, c2, rstd, head) with head = head_len(dx row) (the
// kernels run [0, head) and [head, n) so that the second part's stores are aligned).
template <class V, class RowFn>
LN_INLINE void backward_groups(const float* dy, const float* xhat, const float* rstd,
                               const float* w, std::int64_t r0, std::int64_t r1, std::int64_t n,
                               const LnTrees& tr, vf<V>* dt, vf<V>* xt, vf<V> fn, float* dx_out,
                               RowFn&& row_fn) {
  constexpr int kL = V::W;
  for (std::int64_t t0 = r0; t0 < r1; t0 += kL) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kL, r1 - t0));
    vf<V> c1v, c2v;
    backward_group_stats<V>(dy, xhat, w, t0, rows, n, tr, dt, xt, fn, c1v, c2v);
    for (int r = 0; r < rows; ++r) {
      float* o = dx_out + (t0 + r) * n;
      row_fn(dy + (t0 + r) * n, xhat + (t0 + r) * n, o, c1v[r], c2v[r], rstd[t0 + r],
             head_len(o, n));
    }
  }
}

template <class V>
void backward_rows_impl(const float* dy, const float* xhat, const float* rstd, const float* w,
                        std::int64_t r0, std::int64_t r1, std::int64_t n, float* dx_out,
                        bool accumulate, const LnTrees& tr) {
  vf<V>* dt = tile<V>(0, n);
  vf<V>* xt = tile<V>(1, n);
  const vf<V> fn = splat<V>(static_cast<float>(n));
  backward_groups<V>(dy, xhat, rstd, w, r0, r1, n, tr, dt, xt, fn, dx_out,
                     [&](const float* dr, const float* xh, float* o, float c1, float c2, float rs,
                         std::int64_t h) {
                       if (accumulate) {
                         backward_row_range<true>(dr, xh, w, c1, c2, rs, o, 0, h);
                         backward_row_range<true>(dr, xh, w, c1, c2, rs, o, h, n);
                       } else {
                         backward_row_range<false>(dr, xh, w, c1, c2, rs, o, 0, h);
                         backward_row_range<false>(dr, xh, w, c1, c2, rs, o, h, n);
                       }
                     });
}

constexpr std::int64_t kColChunk = 64;

// csum_rows' post-order counter for a pair of column chunks (dw and db leaves, w <= kColChunk
// columns): push adds a leaf and then merges left + right as often as the token tree's schedule
// says; finish copies the root into ow/ob (the rest folded from the top down for a partial
// schedule; -0.0 when nothing was pushed).
struct ColPairCounter {
  alignas(64) float lw[64][kColChunk], lb[64][kColChunk];
  int depth = 0;
  // leaf_w / leaf_b are consumed (they hold the merged subtree afterwards).
  LN_INLINE void push(float* leaf_w, float* leaf_b, std::int64_t w, int merges) {
    for (int k = 0; k < merges; ++k) {
      --depth;
      for (std::int64_t j = 0; j < w; ++j) {
        leaf_w[j] = lw[depth][j] + leaf_w[j];
        leaf_b[j] = lb[depth][j] + leaf_b[j];
      }
    }
    std::copy(leaf_w, leaf_w + w, lw[depth]);
    std::copy(leaf_b, leaf_b + w, lb[depth]);
    ++depth;
  }
  LN_INLINE void finish(float* ow, float* ob, std::int64_t w) const {
    if (depth == 0) {
      std::fill(ow, ow + w, kAdditiveIdentity);
      std::fill(ob, ob + w, kAdditiveIdentity);
      return;
    }
    std::copy(lw[depth - 1], lw[depth - 1] + w, ow);
    std::copy(lb[depth - 1], lb[depth - 1] + w, ob);
    for (int l = depth - 2; l >= 0; --l)
      for (std::int64_t j = 0; j < w; ++j) {
        ow[j] = lw[l][j] + ow[j];
        ob[j] = lb[l][j] + ob[j];
      }
  }
};

// dw[j] = csum over rows t of (dy[t,j] * xhat[t,j]) and db[j] = csum over t of dy[t,j] for the
// columns [j0, j0 + w), w <= kColChunk: the bits of csum_rows (runtime/csum.cpp) on the staged
// product and on dy (per column a chain from -0.0 over each token leaf of tr, leaves merged by
// the token tree's schedule). Full chunks take a fixed-width loop the compiler vectorizes over
// columns.
template <std::int64_t W>
void param_grad_cols_w(const float* dy, const float* xhat, std::int64_t n, std::int64_t j0,
                       std::int64_t wdyn, const LnTrees& tr, float* dw, float* db) {
  const std::int64_t w = W > 0 ? W : wdyn;
  ColPairCounter counter;
  alignas(64) float leaf_w[kColChunk], leaf_b[kColChunk];
  for (std::int64_t u = 0; u < tr.leaves; ++u) {
    const std::int64_t lo = tr.leaf_bound[u], hi = tr.leaf_bound[u + 1];
    for (std::int64_t j = 0; j < w; ++j) leaf_w[j] = leaf_b[j] = kAdditiveIdentity;
    for (std::int64_t i = lo; i < hi; ++i) {
      const float* dr = dy + i * n + j0;
      const float* xr = xhat + i * n + j0;
      for (std::int64_t j = 0; j < w; ++j) {
        const float prod = dr[j] * xr[j];
        leaf_w[j] = leaf_w[j] + prod;
        leaf_b[j] = leaf_b[j] + dr[j];
      }
    }
    counter.push(leaf_w, leaf_b, w, tr.leaf_merges[u]);
  }
  counter.finish(dw + j0, db + j0, w);
}

void param_grad_cols_impl(const float* dy, const float* xhat, std::int64_t n, std::int64_t j0,
                          std::int64_t w, const LnTrees& tr, float* dw, float* db) {
  if (w == kColChunk)
    param_grad_cols_w<kColChunk>(dy, xhat, n, j0, w, tr, dw, db);
  else
    param_grad_cols_w<0>(dy, xhat, n, j0, w, tr, dw, db);
}

// dx = (dy*w - (xhat*c2 + c1))*rstd (added to o when Acc) and, in the same pass, the column
// chains lw[k] = lw[k] + dy*xhat, lb[k] = lb[k] + dy of the parameter-gradient leaves.
template <bool Acc>
LN_INLINE void backward_row_range_cols(const float* dr, const float* xh, const float* w, float c1,
                                       float c2, float rs, float* o, float* lw, float* lb,
                                       std::int64_t k0, std::int64_t k1) {
#pragma GCC ivdep
  for (std::int64_t k = k0; k < k1; ++k) {
    const float g = dr[k] * w[k];
    const float d = (g - (xh[k] * c2 + c1)) * rs;
    if constexpr (Acc)
      o[k] = o[k] + d;
    else
      o[k] = d;
    const float prod = dr[k] * xh[k];
    lw[k] = lw[k] + prod;
    lb[k] = lb[k] + dr[k];
  }
}

// Token leaves [u0, u1) of tr (leaf u = rows [leaf_bound[u], leaf_bound[u + 1])): the input
// gradient of backward_rows_impl, and per block the parameter-gradient leaves of csum_rows
// (per column a chain over the block's rows in order from -0.0): leaves + u*2n holds the dw
// leaf (n floats) then the db leaf. dy and xhat are read once for both.
template <class V>
void backward_blocks_impl(const float* dy, const float* xhat, const float* rstd, const float* w,
                          std::int64_t n, std::int64_t u0, std::int64_t u1, float* dx_out,
                          bool accumulate, const LnTrees& tr, float* leaves) {
  constexpr int kL = V::W;
  vf<V>* dt = tile<V>(0, n);
  vf<V>* xt = tile<V>(1, n);
  vf<V>* acc = tile<V>(2, (2 * n + 48 + kL - 1) / kL + 1);
  const vf<V> fn = splat<V>(static_cast<float>(n));
  for (std::int64_t u = u0; u < u1; ++u) {
    const std::int64_t lo = tr.leaf_bound[u], hi = tr.leaf_bound[u + 1];
    // Column accumulators placed so lw + head and lb + head are 64-byte aligned when the dx
    // rows are (head = head_len(dx row)); any placement gives the same bits.
    const std::int64_t h0 = head_len(dx_out + lo * n, n);
    const std::int64_t shift = (16 - h0) % 16;
    const std::int64_t lb_off = (shift + n + 15) / 16 * 16 + shift;
    float* lw = reinterpret_cast<float*>(acc) + shift;
    float* lb = reinterpret_cast<float*>(acc) + lb_off;
    for (std::int64_t k = 0; k < n; ++k) lw[k] = lb[k] = kAdditiveIdentity;
    backward_groups<V>(dy, xhat, rstd, w, lo, hi, n, tr, dt, xt, fn, dx_out,
                       [&](const float* dr, const float* xh, float* o, float c1, float c2, float rs,
                           std::int64_t h) {
                         if (accumulate) {
                           backward_row_range_cols<true>(dr, xh, w, c1, c2, rs, o, lw, lb, 0, h);
                           backward_row_range_cols<true>(dr, xh, w, c1, c2, rs, o, lw, lb, h, n);
                         } else {
                           backward_row_range_cols<false>(dr, xh, w, c1, c2, rs, o, lw, lb, 0, h);
                           backward_row_range_cols<false>(dr, xh, w, c1, c2, rs, o, lw, lb, h, n);
                         }
                       });
    std::copy(lw, lw + n, leaves + u * 2 * n);
    std::copy(lb, lb + n, leaves + u * 2 * n + n);
  }
}

// dw[j], db[j] for columns [j0, j0 + w) (w <= kColChunk): the tr.leaves token leaves of
// backward_blocks_impl merged by the token tree's schedule (csum_rows' tree); -0.0 when there
// are none.
template <std::int64_t W>
void fold_leaves_w(const float* leaves, std::int64_t n, std::int64_t j0, std::int64_t wdyn,
                   const LnTrees& tr, float* dw, float* db) {
  const std::int64_t w = W > 0 ? W : wdyn;
  ColPairCounter counter;
  alignas(64) float leaf_w[kColChunk], leaf_b[kColChunk];
  for (std::int64_t u = 0; u < tr.leaves; ++u) {
    const float* sw = leaves + u * 2 * n + j0;
    const float* sb = sw + n;
    for (std::int64_t j = 0; j < w; ++j) {
      leaf_w[j] = sw[j];
      leaf_b[j] = sb[j];
    }
    counter.push(leaf_w, leaf_b, w, tr.leaf_merges[u]);
  }
  counter.finish(dw + j0, db + j0, w);
}

void fold_leaves_impl(const float* leaves, std::int64_t n, std::int64_t j0, std::int64_t w,
                      const LnTrees& tr, float* dw, float* db) {
  if (w == kColChunk)
    fold_leaves_w<kColChunk>(leaves, n, j0, w, tr, dw, db);
  else
    fold_leaves_w<0>(leaves, n, j0, w, tr, dw, db);
}

#undef LN_INLINE

}  // namespace
}  // namespace lockstep::ln_detail

// Defines the exported entry points of one ISA path over trait V (used once per ln_rows*.cpp,
// inside namespace lockstep::ln_detail).
#define LOCKSTEP_LN_ROWS_DEFINE(SUFFIX, V)                                                         \
  void forward_rows_##SUFFIX(float* xw, const float* x, const float* res, std::int64_t r0,         \
                             std::int64_t r1, std::int64_t n, const float* w, const float* b,      \
                             float eps, const LnTrees& tr, float* xhat, float* rstd, float* y) {   \
    forward_rows_impl<V>(xw, x, res, r0, r1, n, w, b, eps, tr, xhat, rstd, y);                     \
  }                                                                                                \
  void backward_rows_##SUFFIX(const float* dy, const float* xhat, const float* rstd,               \
                              const float* w, std::int64_t r0, std::int64_t r1, std::int64_t n,    \
                              float* dx_out, bool accumulate, const LnTrees& tr) {                 \
    backward_rows_impl<V>(dy, xhat, rstd, w, r0, r1, n, dx_out, accumulate, tr);                   \
  }                                                                                                \
  void param_grad_cols_##SUFFIX(const float* dy, const float* xhat, std::int64_t n,                \
                                std::int64_t j0, std::int64_t w, const LnTrees& tr, float* dw,     \
                                float* db) {                                                       \
    param_grad_cols_impl(dy, xhat, n, j0, w, tr, dw, db);                                          \
  }                                                                                                \
  void backward_blocks_##SUFFIX(const float* dy, const float* xhat, const float* rstd,             \
                                const float* w, std::int64_t n, std::int64_t u0, std::int64_t u1,  \
                                float* dx_out, bool accumulate, const LnTrees& tr,                 \
                                float* leaves) {                                                   \
    backward_blocks_impl<V>(dy, xhat, rstd, w, n, u0, u1, dx_out, accumulate, tr, leaves);         \
  }                                                                                                \
  void fold_leaves_##SUFFIX(const float* leaves, std::int64_t n, std::int64_t j0, std::int64_t w,  \
                            const LnTrees& tr, float* dw, float* db) {                             \
    fold_leaves_impl(leaves, n, j0, w, tr, dw, db);                                                \
  }
