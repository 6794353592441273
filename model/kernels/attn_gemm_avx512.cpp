// The AVX-512 kernels of model/kernels/attn_gemm.hpp (compiled with the avx512 flags, reached only
// through the dispatch in attn_gemm.cpp). Vectors span the output's columns (keys for scores,
// head_dim for prefix/suffix), never the reduced axis; every reduction is an FMA chain in
// increasing index whose first step is a plain product (== fma(a, b, -0.0)), and leaves are
// combined as the canonical GEMM combines them (runtime/gemm_kernel.hpp: binary counter,
// older + newer).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "model/kernels/attn_gemm.hpp"
#include "runtime/transpose_avx512.hpp"

namespace lockstep::attn_gemm_detail {
namespace {

constexpr int R = kTileRows;  // output rows per register tile

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// An R x (NV * 16) register tile. Chains: element (r, v*16 + l) accumulates
// a[r * ars + k * aks] * b[k * ldb + v * 16 + l] over k in increasing order.
template <int NV>
struct Tile {
  static constexpr int FLOATS = R * NV * 16;
  __m512 c[R][NV];

  // c = chain over k in [0, n), n >= 1, from -0.0 (first step a product).
  template <std::int64_t ARS, std::int64_t AKS>
  [[gnu::always_inline]] inline void chain(const float* a, std::int64_t ars, std::int64_t aks,
                                           const float* b, std::int64_t ldb, std::int64_t n) {
    const std::int64_t rs = ARS ? ARS : ars, ks = AKS ? AKS : aks;
    {
      __m512 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * rs]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) c[r][v] = _mm512_mul_ps(av, bv[v]);
      }
    }
    for (std::int64_t k = 1; k < n; ++k) {
      __m512 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + k * ldb + v * 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * rs + k * ks]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
      }
    }
  }
  // c = s + c (s is the older, left subtree), s a tile in memory.
  inline void add_left(const float* s) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        c[r][v] = _mm512_add_ps(_mm512_loadu_ps(s + (r * NV + v) * 16), c[r][v]);
  }
  inline void save(float* s) const {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(s + (r * NV + v) * 16, c[r][v]);
  }
  // Whether some element is +0.0 or -0.0 (NaN compares unequal).
  inline bool any_zero() const {
    __mmask16 z = 0;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        z |= _mm512_cmp_ps_mask(c[r][v], _mm512_setzero_ps(), _CMP_EQ_OQ);
    return z != 0;
  }
  inline void store_rows(float* y, std::int64_t ldy) const {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(y + r * ldy + v * 16, c[r][v]);
  }
};

// ---- scores: S[i, j] = chain over c of A[i, c] * X[j, c] -----------------------------------
// xt: the tile's first key in a panel of X^T whose rows (c) are ldt floats apart; s: S[i0, j],
// rows C floats apart.
template <int NV>
[[gnu::noinline]] void score_tile(const float* a, std::int64_t lda, const float* xt,
                                  std::int64_t ldt, std::int64_t C, std::int64_t hd, float* s) {
  Tile<NV> t;
  t.template chain<0, 1>(a, lda, 1, xt, ldt, hd);
  t.store_rows(s, C);
}

// ---- prefix: Y[i, :] = P[i, 0:kend) X[0:kend, :] --------------------------------------------
// One pass over a row tile: its R rows of P from p (C floats apart), keys [0, kend), NV vectors
// of X's and Y's columns from x and y. zero: nullptr, or set when some output element is a
// zero (tested in the registers).
template <int NV>
void prefix_pass(std::int64_t C, int B, bool tree, std::int64_t kend, const float* p,
                 const float* x, std::int64_t ldx, float* y, std::int64_t ldy, float* stk,
                 bool* zero) {
  constexpr int TF = Tile<NV>::FLOATS;
  Tile<NV> t;
  if (!tree) {
    t.template chain<0, 1>(p, C, 1, x, ldx, kend);
  } else {  // binary counter over the leaves (blocks of B keys) of [0, kend)
    int top = 0;
    std::int64_t leafno = 0;
    for (std::int64_t k0 = 0; k0 < kend; k0 += B, ++leafno) {
      t.template chain<0, 1>(p + k0, C, 1, x + k0 * ldx, ldx,
                             std::min<std::int64_t>(B, kend - k0));
      for (std::int64_t c = leafno; c & 1; c >>= 1) t.add_left(stk + (--top) * TF);
      if (k0 + B < kend) t.save(stk + (top++) * TF);
    }
    while (top > 0) t.add_left(stk + (--top) * TF);
  }
  if (zero && t.any_zero()) *zero = true;
  t.store_rows(y, ldy);
}

// Y's NV vectors a row in passes of NH (NV, or 2 for the halves of head_dim 64: AttnTile).
template <int NV, int NH>
void prefix_impl(std::int64_t C, int B, bool tree, const float* P, const float* X, std::int64_t ldx,
                 float* Y, std::int64_t ldy, float* stk, bool* zero) {
  for (std::int64_t i0 = 0; i0 < C; i0 += R) {
    // Keys past the tile's last row hold P = +0.0 for every row of the tile: the last leaf
    // stops there (see causal_prefix in attn_gemm.hpp).
    const std::int64_t kend = std::min(C, i0 + R);
    for (int v = 0; v < NV; v += NH)
      prefix_pass<NH>(C, B, tree, kend, P + i0 * C, X + v * 16, ldx, Y + i0 * ldy + v * 16, ldy,
                      stk, zero);
  }
}

// ---- suffix: Y[j, :] = A[j0:C, j]^T X[j0:C, :] (j0: the first row of j's tile) -------------
// The tree is the canonical T over all nbt leaves with leaves [0, m) absent (CausalGemms::tree:
// a node with one side absent is its other side). A binary counter builds it leaf by leaf:
// leaf q closes the aligned subtrees of its trailing one bits, merging (older + newer) with
// the level's slot where that slot is present and passing the newer one up where it is
// absent (its leaves were all left out); the final fold from the right skips absent levels.
// For m == 0 this is the prefix kernel's counter.
// One pass over the row tile at j0: op(A)[j0 + r, i] = a[i * as + r], NV vectors of X's and Y's
// columns from x and y.
template <int NV>
void suffix_pass(std::int64_t C, int B, bool tree, std::int64_t j0, const float* a,
                 std::int64_t as, const float* x, std::int64_t ldx, float* y, std::int64_t ldy,
                 float* slots, bool* zero) {
  constexpr int TF = Tile<NV>::FLOATS;
  const std::int64_t nbt = ceil_div(C, B);
  const std::int64_t m = j0 / B;  // leaves [0, m) hold only A[i, j] with i < j: zeros
  Tile<NV> t;
  // Queries before the tile's first row hold A = +0.0 for every row of the tile: the first
  // kept leaf starts at j0 (see causal_suffix in attn_gemm.hpp).
  if (!tree) {
    t.template chain<1, 0>(a + j0 * as, 1, as, x + j0 * ldx, ldx, C - j0);
  } else {
    std::uint64_t present = 0;  // bit l: slot l (an aligned subtree of 2^l leaves) is held
    for (std::int64_t q = m; q < nbt; ++q) {
      const std::int64_t k0 = std::max(q * B, j0);
      t.template chain<1, 0>(a + k0 * as, 1, as, x + k0 * ldx, ldx,
                             std::min<std::int64_t>((q + 1) * B, C) - k0);
      int l = 0;
      for (std::int64_t c = q; c & 1; c >>= 1, ++l)
        if (present >> l & 1) t.add_left(slots + l * TF), present &= ~(std::uint64_t{1} << l);
      if (q + 1 < nbt) t.save(slots + l * TF), present |= std::uint64_t{1} << l;
    }
    for (int l = 0; present >> l; ++l)
      if (present >> l & 1) t.add_left(slots + l * TF);
  }
  if (zero && t.any_zero()) *zero = true;
  t.store_rows(y, ldy);
}

// Y's NV vectors a row in passes of NH (as prefix_impl). The tile's operand is 8 columns of the
// C x C matrix A, one line of a 4 KiB-strided row per step; with several passes it is first
// copied to `strip` (C * R floats: row i at strip + i * R), so that memory is read once and
// the passes read contiguous rows. A plain copy: the same values in the same order.
template <int NV, int NH>
void suffix_impl(std::int64_t C, int B, bool tree, const float* A, const float* X, std::int64_t ldx,
                 float* Y, std::int64_t ldy, float* strip, float* slots, bool* zero) {
  for (std::int64_t j0 = 0; j0 < C; j0 += R) {
    const float* a = A + j0;  // op(A)[j0 + r, i] = A[i * C + j0 + r]
    std::int64_t as = C;
    if constexpr (NH < NV) {
      for (std::int64_t i = j0; i < C; ++i)
        _mm256_storeu_ps(strip + i * R, _mm256_loadu_ps(A + i * C + j0));
      a = strip, as = R;
    }
    for (int v = 0; v < NV; v += NH)
      suffix_pass<NH>(C, B, tree, j0, a, as, X + v * 16, ldx, Y + j0 * ldy + v * 16, ldy, slots,
                      zero);
  }
}

// X [C, hd] rows ldx floats apart: the q/k/v buffer (ldx = 3 d_model) and dO (ldx = d_model)
// put them at a few 4 KiB-periodic offsets, so a head's slice maps to a handful of L1 sets and
// every tile re-reads it from L2. The kernels read a contiguous copy instead (buf, C * hd
// floats; a plain copy, so the same bits): at C 256, hd 32, ldx 768 the copy costs ~1 us and
// prefix / suffix went 18 -> 16.5 us and 22.5 -> 20 us per call (20-25% slower with strided X
// than with contiguous X before).
// finite: nullptr, or cleared when some X[i, c] (c < hd) is Inf or NaN (every exponent bit
// set), tested on the vectors on their way through.
const float* contiguous_rows(const float* X, std::int64_t ldx, std::int64_t C, std::int64_t hd,
                             float* buf, bool* finite) {
  if (ldx == hd && !finite) return X;
  const __m512i expo = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  // hd is a multiple of 16 (attn_gemm_supported): whole vectors, no call per 128-byte row.
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t c = 0; c < hd; c += 16) {
      const __m512 v = _mm512_loadu_ps(X + i * ldx + c);
      if (finite)
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), expo), expo);
      if (ldx != hd) _mm512_storeu_ps(buf + i * hd + c, v);
    }
  if (finite && bad) *finite = false;
  return ldx == hd ? X : buf;
}

template <class F>
void by_nv(std::int64_t hd, F&& f) {
  switch (hd / 16) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    default:
      return f.template operator()<4>();
  }
}

}  // namespace

void causal_scores_avx512(std::int64_t C, std::int64_t hd, const float* A, std::int64_t lda,
                          const float* X, std::int64_t ldx, float* S, float* scratch) {
  // X transposed in panels of 32 keys: xt[(j / 32) * hd * 32 + c * 32 + j % 32] = X[j, c], so a
  // tile's steps read one contiguous [hd][32] panel (a row of C floats per step would put every
  // step's loads in the same L1 set once C * 4 bytes is a multiple of 4 KiB: the scores took
  // 19% less time at C 1024, head_dim 64 in bench_attn). A plain copy: the same values in the
  // same order.
  constexpr std::int64_t P = 32;
  float* xt = scratch;
  for (std::int64_t j0 = 0; j0 < C; j0 += 16)
    for (std::int64_t c0 = 0; c0 < hd; c0 += 16)
      simd::transpose16_avx512(X + j0 * ldx + c0, ldx, xt + j0 / P * hd * P + c0 * P + j0 % P, P);
  for (std::int64_t i0 = 0; i0 < C; i0 += R) {
    // Columns [0, jend) cover j <= i for every row of the tile.
    const std::int64_t jend = std::min(C, ceil_div(i0 + R, 16) * 16);
    std::int64_t j = 0;  // a multiple of P: its panel starts at xt + j * hd
    for (; j + P <= jend; j += P)
      score_tile<2>(A + i0 * lda, lda, xt + j * hd, P, C, hd, S + i0 * C + j);
    if (j < jend) score_tile<1>(A + i0 * lda, lda, xt + j * hd, P, C, hd, S + i0 * C + j);
  }
}

namespace {
// The shared body of causal_prefix / causal_suffix: X made contiguous (and tested), then the
// suffix's strip and the kernel's tree in the rest of the scratch, Y's zero test when checks
// are asked for; halves: head_dim 64 in two passes of 32 columns (AttnTile).
template <bool Suffix>
void causal_product(std::int64_t C, std::int64_t hd, int B, bool tree, bool halves,
                    const float* A, const float* X, std::int64_t ldx, float* Y, std::int64_t ldy,
                    float* scratch, AttnChecks* checks) {
  if (checks) *checks = AttnChecks{};
  const float* x = contiguous_rows(X, ldx, C, hd, scratch, checks ? &checks->x_finite : nullptr);
  float* strip = scratch + C * hd;  // the suffix's copy of A's columns (several passes)
  float* rest = strip + C * R;
  bool* zero = checks ? &checks->y_zero : nullptr;
  by_nv(hd, [&]<int NV>() {
    const auto run = [&]<int NH>() {
      if constexpr (Suffix)
        suffix_impl<NV, NH>(C, B, tree, A, x, hd, Y, ldy, strip, rest, zero);
      else
        prefix_impl<NV, NH>(C, B, tree, A, x, hd, Y, ldy, rest, zero);
    };
    if constexpr (NV == 4)
      if (halves) return run.template operator()<2>();
    run.template operator()<NV>();
  });
}
}  // namespace

void causal_prefix_avx512(std::int64_t C, std::int64_t hd, int B, bool tree, bool halves,
                          const float* P, const float* X, std::int64_t ldx, float* Y,
                          std::int64_t ldy, float* scratch, AttnChecks* checks) {
  causal_product<false>(C, hd, B, tree, halves, P, X, ldx, Y, ldy, scratch, checks);
}

void causal_suffix_avx512(std::int64_t C, std::int64_t hd, int B, bool tree, bool halves,
                          const float* A, const float* X, std::int64_t ldx, float* Y,
                          std::int64_t ldy, float* scratch, AttnChecks* checks) {
  causal_product<true>(C, hd, B, tree, halves, A, X, ldx, Y, ldy, scratch, checks);
}

}  // namespace lockstep::attn_gemm_detail
