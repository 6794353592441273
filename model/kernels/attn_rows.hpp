// Row kernels of causal attention (per sequence and head, row-major [C, C] score matrices).
// Determinism contract (docs/design.md section 2): each row is computed by a fixed sequence of
// IEEE basic operations, identical on every ISA path (scalar, AVX2, AVX-512; the result never
// depends on ctx.isa, on the row range a call covers or on threads, which split calls):
//
// softmax_causal_rows, for each row i in [r0, r1) (n = i + 1 keys j <= i):
//   s[j] = s[j] * scale; m = max_j s[j] (m = s[0], then m = s[j] > m ? s[j] : m);
//   e[j] = ls_exp(s[j] - m); P[j] = e[j] / csum(e[0..n)); P[j] = +0.0 for j > i.
//   (The max is found in vector lanes; it can differ from the sequential scan only in the sign
//   of a zero maximum, and s - (+-0) then differs only when s is a zero, where exp gives 1
//   either way, so P is the same.)
// softmax_backward_rows, for each row i (G holds dP, masked entries ignored):
//   dot = cdot(P[i, 0..n), G[i, 0..n)); G[i, j] = (P[i, j] * (G[i, j] - dot)) * scale for
//   j <= i, +0.0 for j > i.
// csum / cdot are runtime/csum.hpp's canonical sums with block ctx.reduce_block; eight rows are
// reduced together so their chains overlap (on AVX-512 with the block a multiple of 16: sixteen
// rows in the lanes of a vector). ctx.threads is ignored (single thread).
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep {

void softmax_causal_rows(const KernelCtx& ctx, float* S, std::int64_t C, std::int64_t r0,
                         std::int64_t r1, float scale);
void softmax_backward_rows(const KernelCtx& ctx, const float* P, float* G, std::int64_t C,
                           std::int64_t r0, std::int64_t r1, float scale);

// The scans of the exact modes' causal products (CausalGemms, model/gpt_causal_gemms.cpp):
// bit tests only, no arithmetic, so every ISA path gives the same answer. Rows of n floats,
// `ld` apart.
// true when every X[r, c] (r < rows, c < n) is finite (no Inf, no NaN).
bool rows_all_finite(const KernelCtx& ctx, const float* X, std::int64_t rows, std::int64_t n,
                     std::int64_t ld);
// The first row r in [r0, r1) whose Y[r, 0..n) holds a zero (+0.0 or -0.0); r1 if none.
std::int64_t first_row_with_zero(const KernelCtx& ctx, const float* Y, std::int64_t r0,
                                 std::int64_t r1, std::int64_t n, std::int64_t ld);

namespace attn_detail {
// The per-ISA instantiations of model/kernels/attn_rows_impl.hpp behind the dispatch above.
#define LOCKSTEP_ATTN_ROWS_DECLARE(SUFFIX)                                                    \
  void softmax_causal_rows_##SUFFIX(const KernelCtx& ctx, float* S, std::int64_t C,           \
                                    std::int64_t r0, std::int64_t r1, float scale,            \
                                    const std::uint8_t* table);                               \
  void softmax_backward_rows_##SUFFIX(const KernelCtx& ctx, const float* P, float* G,         \
                                      std::int64_t C, std::int64_t r0, std::int64_t r1,       \
                                      float scale, const std::uint8_t* table);                \
  bool rows_all_finite_##SUFFIX(const float* X, std::int64_t rows, std::int64_t n,            \
                                std::int64_t ld);                                             \
  std::int64_t first_row_with_zero_##SUFFIX(const float* Y, std::int64_t r0, std::int64_t r1, \
                                            std::int64_t n, std::int64_t ld);
LOCKSTEP_ATTN_ROWS_DECLARE(scalar)
LOCKSTEP_ATTN_ROWS_DECLARE(avx2)
LOCKSTEP_ATTN_ROWS_DECLARE(avx512)
#undef LOCKSTEP_ATTN_ROWS_DECLARE
}  // namespace attn_detail

}  // namespace lockstep
