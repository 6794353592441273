// Per-ISA row kernels of LayerNorm (model/ops.hpp's layernorm_forward,
// residual_layernorm_forward and layernorm_backward call them inside their OpenMP loops).
// Determinism contract: every function returns the bits of the literal per-row definitions of
// model/ops.hpp on every ISA path (scalar, AVX2, AVX-512) and for any row range a call covers.
// Row sums are vectorized ACROSS rows (one row per vector lane; each lane runs its row's csum
// chains and binary-counter tree in the literal order), element-wise passes along features,
// with the same IEEE operations in the same order (no FMA: -ffp-contract=off). Single thread.
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep::ln_detail {

// The trees of one LayerNorm call (runtime/reduce_tree.hpp): B, the schedule of a feature row's
// ceil(n / B) leaves (flat), and the token axis' leaves (KernelCtx::rule(): flat, or sequences).
struct LnTrees {
  int B;
  const std::uint8_t* row_merges;   // merges after each leaf of a row of n features
  std::int64_t leaves;              // token-axis leaves
  const std::int64_t* leaf_bound;   // [leaves + 1]: leaf u is rows [bound[u], bound[u + 1])
  const std::uint8_t* leaf_merges;  // [leaves]
};

// Rows [r0, r1) of the LayerNorm forward; with res != nullptr, x == xw and each row first does
// xw = xw + res. mean = csum(x)/n; c = x - mean; var = csum(c*c)/n; rstd = 1/sqrt(var + eps);
// xhat = c*rstd; y = xhat*w + b.
void forward_rows(const KernelCtx& ctx, const LnTrees& tr, float* xw, const float* x,
                  const float* res, std::int64_t r0, std::int64_t r1, std::int64_t n,
                  const float* w, const float* b, float eps, float* xhat, float* rstd, float* y);
// Rows [r0, r1) of the LayerNorm input gradient: g = dy*w; c1 = csum(g)/n; c2 = csum(g*xhat)/n;
// dx = (g - (xhat*c2 + c1))*rstd; dx_out = accumulate ? dx_out + dx : dx.
void backward_rows(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                   const float* rstd, const float* w, std::int64_t r0, std::int64_t r1,
                   std::int64_t n, float* dx_out, bool accumulate);
// Columns [j0, j0 + w) (w <= 64) of dw = csum over the token rows of dy*xhat and db = csum of
// dy: the bits of runtime/csum.hpp's csum_rows (column chains, vectorized over columns).
void param_grad_cols(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                     std::int64_t n, std::int64_t j0, std::int64_t w, float* dw, float* db);

// Fused backward over token leaves [u0, u1) (leaf u = rows [bound[u], bound[u + 1])): the
// input gradient of backward_rows for those rows and, read in the same pass, the
// parameter-gradient leaves of csum_rows: leaves[u*2n + j] = the chain over the leaf's rows of
// dy*xhat (column j, from -0.0, rows in order), leaves[u*2n + n + j] = of dy.
void backward_blocks(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                     const float* rstd, const float* w, std::int64_t n, std::int64_t u0,
                     std::int64_t u1, float* dx_out, bool accumulate, float* leaves);
// Columns [j0, j0 + w) (w <= 64) of dw and db from the token leaves: csum_rows' tree over
// them (so the pair gives param_grad_cols' bits).
void fold_leaves(const KernelCtx& ctx, const LnTrees& tr, const float* leaves, std::int64_t n,
                 std::int64_t j0, std::int64_t w, float* dw, float* db);

// The per-ISA instantiations of model/kernels/ln_rows_impl.hpp behind the dispatch above.
#define LOCKSTEP_LN_ROWS_DECLARE(SUFFIX)                                                           \
  void forward_rows_##SUFFIX(float* xw, const float* x, const float* res, std::int64_t r0,         \
                             std::int64_t r1, std::int64_t n, const float* w, const float* b,      \
                             float eps, const LnTrees& tr, float* xhat, float* rstd, float* y);    \
  void backward_rows_##SUFFIX(const float* dy, const float* xhat, const float* rstd,               \
                              const float* w, std::int64_t r0, std::int64_t r1, std::int64_t n,    \
                              float* dx_out, bool accumulate, const LnTrees& tr);                  \
  void param_grad_cols_##SUFFIX(const float* dy, const float* xhat, std::int64_t n,                \
                                std::int64_t j0, std::int64_t w, const LnTrees& tr, float* dw,     \
                                float* db);                                                        \
  void backward_blocks_##SUFFIX(const float* dy, const float* xhat, const float* rstd,             \
                                const float* w, std::int64_t n, std::int64_t u0, std::int64_t u1,  \
                                float* dx_out, bool accumulate, const LnTrees& tr,                 \
                                float* leaves);                                                    \
  void fold_leaves_##SUFFIX(const float* leaves, std::int64_t n, std::int64_t j0, std::int64_t w,  \
                            const LnTrees& tr, float* dw, float* db);
LOCKSTEP_LN_ROWS_DECLARE(scalar)
LOCKSTEP_LN_ROWS_DECLARE(avx2)
LOCKSTEP_LN_ROWS_DECLARE(avx512)
#undef LOCKSTEP_LN_ROWS_DECLARE

}  // namespace lockstep::ln_detail
