// The GEMMs of causal attention for one (sequence, head), fused into AVX-512 loops that read
// Q, K, V, P and their gradients in place: no packing, no per-block GEMM calls, and only the
// causal part of each product (at 8-row granularity) is computed.
//
// Determinism contract: these kernels evaluate the same IEEE operations, in the same order, as
// the canonical GEMM (runtime/gemm.hpp) of docs/design.md section 2 on the causal blocks that
// model/gpt_causal_gemms.hpp's CausalGemms would pass to it, so the caller gets the bits of
// the full-size GEMMs of the definition (gpt.hpp):
//  * causal_scores: S[i, j] = sum_c A[i, c] X[j, c] for every j <= i (entries j > i that are
//    written hold values nobody reads; softmax overwrites them). One FMA chain over c from
//    -0.0, the first step a product: the canonical leaf when hd <= B, and the `chain` GEMM's
//    element for any hd. Exact for every input.
//  * causal_prefix: Y[i, :] = sum_j P[i, j] X[j, :] over the key leaves (blocks of B keys)
//    that cover [0, i'] where i' is the last row of i's 8-row tile; the leaves past them hold
//    P = +0.0 and are left out, and the last kept leaf's chain stops after key i' (its later
//    terms are +0.0 products). tree = true: leaves are FMA chains combined by the canonical
//    tree T over the kept leaves (a prefix of the full tree); tree = false: one chain.
//  * causal_suffix: Y[j, :] = sum_i A[i, j] X[i, :] over the query leaves from the one holding
//    j0 (the first row of j's tile) to the end; the leaves before hold A = +0.0 and are left
//    out of the tree (the subtree structure of the full T is kept: CausalGemms::tree), and the
//    first kept leaf's chain starts at query j0 (its earlier terms are +0.0 products).
//  Leaving out terms or leaves whose every product is a zero changes nothing unless the result
//  is a zero: a chain or sum with a +-0.0 added gives the same x for every x != 0, and a chain
//  started later from -0.0 meets the same first nonzero product. So prefix/suffix results equal
//  the full GEMM except possibly in the sign of a zero, provided X is finite. The caller
//  therefore (as CausalGemms does for its own omissions) runs the full GEMM when X has an Inf
//  or NaN and recomputes every output row that contains a zero with the full-K GEMM.
// Single thread per call; callers split (sequence, head) pairs over threads.
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep {

// True when the fused kernels apply: AVX-512 path, C a multiple of 16, hd in {16, 32, 48, 64},
// and (tree mode) hd <= B so that a score is one canonical leaf.
bool attn_gemm_supported(const KernelCtx& ctx, std::int64_t C, std::int64_t hd, bool tree);
// Floats of per-thread scratch the kernels need for (C, hd, B) (prefix and suffix copy X
// into it when ldx != hd, the suffix in halves 8 columns of A).
std::int64_t attn_gemm_scratch_floats(std::int64_t C, std::int64_t hd, int B);

// How the prefix and suffix products cover head_dim 64, the one width with a choice: one 8 x 64
// register tile per row tile (32 accumulators, which with the operands pass the 32 vector
// registers: GCC keeps a few on the stack in the inner loop) or two passes of 8 x 32 over it
// (the suffix copies the tile's 8 columns of A, a 4 KiB-strided line a row, to a contiguous
// strip first, so that they are read from memory once for both passes). Speed only: every
// output element's chain and tree are the same either way (test_attn_gemm runs both).
// by_cpu: halves on Intel, where the spilled accumulators cost most (Ice Lake, GPT-2 small's
// shape: the prefix 19% and the suffix 13% less time in bench_attn's quietest rounds, about
// 0.5-1% of the step), the whole tile elsewhere (AMD Zen 5: the prefix's halves within noise;
// the suffix's, without the strip, 17-25% slower; with the strip not measured there).
// docs/benchmarks.md, "Attention's halves on Intel".
enum class AttnTile { by_cpu, whole, halves };
// A test and benchmark hook (as set_gemm_tuning): set it while no attention kernel runs.
void set_attn_tile(AttnTile t);
// Whether the products at head_dim hd run in halves under the current setting and CPU.
bool attn_tile_halves(std::int64_t hd);

// What the exact modes' fix-ups need to know about a prefix / suffix call (computed on the
// way, only when asked for: the X copy and the register tiles are tested before they are
// stored, instead of scanning X and Y again): pure bit tests, no arithmetic.
struct AttnChecks {
  bool x_finite = true;  // every X[i, c], i < C, c < hd, is finite (no Inf, no NaN)
  bool y_zero = false;   // some Y[i, c], i < C, c < hd, is +0.0 or -0.0
};

// S [C, C] (ld C) from A [C, hd] (lda) and X [C, hd] (ldx).
void causal_scores(std::int64_t C, std::int64_t hd, const float* A, std::int64_t lda,
                   const float* X, std::int64_t ldx, float* S, float* scratch);
// Y [C, hd] (ldy) = P X with P [C, C] (ld C, P[i, j] = +0.0 for j > i), X [C, hd] (ldx).
// checks: nullptr, or where to report AttnChecks.
void causal_prefix(std::int64_t C, std::int64_t hd, int B, bool tree, const float* P,
                   const float* X, std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch,
                   AttnChecks* checks = nullptr);
// Y [C, hd] (ldy) = A^T X with A [C, C] (ld C, A[i, j] = +0.0 for i < j), X [C, hd] (ldx).
void causal_suffix(std::int64_t C, std::int64_t hd, int B, bool tree, const float* A,
                   const float* X, std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch,
                   AttnChecks* checks = nullptr);

namespace attn_gemm_detail {
// Output rows per register tile of the kernels (their scratch size depends on it).
inline constexpr int kTileRows = 8;
void causal_scores_avx512(std::int64_t C, std::int64_t hd, const float* A, std::int64_t lda,
                          const float* X, std::int64_t ldx, float* S, float* scratch);
void causal_prefix_avx512(std::int64_t C, std::int64_t hd, int B, bool tree, bool halves,
                          const float* P, const float* X, std::int64_t ldx, float* Y,
                          std::int64_t ldy, float* scratch, AttnChecks* checks);
void causal_suffix_avx512(std::int64_t C, std::int64_t hd, int B, bool tree, bool halves,
                          const float* A, const float* X, std::int64_t ldx, float* Y,
                          std::int64_t ldy, float* scratch, AttnChecks* checks);
}  // namespace attn_gemm_detail

}  // namespace lockstep
