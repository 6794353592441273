// Tensor parallelism (Megatron-LM): the TP context, the conjugate mappings copy-to-TP and
// reduce-from-TP, and column-/row-parallel linear layers, over float32 row-major activations
// [T tokens, features].
//
// Determinism contract (docs/design.md section 2), invariant mode:
//  - every GEMM is the canonical GEMM (runtime/gemm.hpp) with B = ctx.reduce_block and the tree
//    ctx.tree; a reduction over tokens (weight and bias gradients) runs on the token context
//    (tokens(): whole sequences of `sequence` tokens under halving, flat under pow2);
//  - every TP reduction is tree_allreduce over grid.tp_comm() (rank order = tp index order);
//  - a row-parallel linear splits K = in_features over TP; each rank's local canonical GEMM
//    over its K = in/tp is an aligned subtree of the single-process GEMM when in/tp is a
//    node of the tree (halving: in / tp whole blocks with tp a power of two dividing the block
//    count evenly down the tree; pow2: a power-of-two number of whole blocks), so local GEMM +
//    tree allreduce == the TP=1 GEMM bit for bit. The bias is added after the reduction.
//  - column-parallel backward dX = dY_local . W_local sums over the local output features, a
//    subtree of the single-process GEMM's K (= out features) under the same condition, and the
//    copy-to-TP backward tree-allreduces it.
// deterministic mode: GemmImpl::chain + vendor MPI_Allreduce (G1/G2); fast:
// fastest_gemm_impl(isa) + vendor allreduce. With TP=1 (or no grid) nothing is communicated.
// Weight and bias gradients are OVERWRITTEN (they are one microbatch's subtree over tokens:
// canonical GEMM TN over the microbatch's tokens; csum_rows for biases).
// debug.perturb (runtime/op_observer.hpp): the `perturb` flags below make one GEMM run as the
// canonical GEMM with block TpContext::perturbed_block() = max(1, B/4) instead of this mode's
// GEMM: the same products summed in another order over K (any K > B/4 gets another tree than
// both the canonical GEMM with block B and the chain), as a nondeterministic kernel would
// give. Off by default.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "runtime/determinism.hpp"
#include "runtime/gemm.hpp"
#include "runtime/grid.hpp"
#include "runtime/isa.hpp"

namespace lockstep {

class TpContext {
 public:
  // grid == nullptr: a single process (TP=1), no MPI needed. sequence: the tokens of one
  // sequence (the token axis of weight and bias gradients); 0: token reductions are flat.
  TpContext(const Grid* grid, Determinism mode, KernelCtx ctx, std::int64_t sequence = 0);

  int size() const { return size_; }
  int rank() const { return rank_; }
  Determinism mode() const { return mode_; }
  const KernelCtx& kernel() const { return ctx_; }
  // The same context with threads = 1 (for GEMMs called inside parallel loops).
  KernelCtx kernel1() const {
    KernelCtx k = ctx_;
    k.threads = 1;
    return k;
  }
  // The context of a reduction over this pass's tokens (KernelCtx::over_sequences).
  const KernelCtx& tokens() const { return tokens_; }
  // The same context with another tree (the causal products, whose pruned halving tree over a
  // power-of-two block count is the pow2 tree of the kept prefix).
  TpContext with_tree(TreeShape tree) const {
    TpContext c = *this;
    c.ctx_.tree = c.tokens_.tree = tree;
    c.tokens_.sequence = tree == TreeShape::halving ? tokens_.sequence : 0;
    return c;
  }
  GemmImpl gemm_impl() const { return impl_; }
  // The block of a perturbed op's canonical GEMM (debug.perturb; see the header comment).
  int perturbed_block() const { return std::max(1, ctx_.reduce_block / 4); }
  const Grid* grid() const { return grid_; }

  // C = op(A) op(B) with this mode's GEMM (see runtime/gemm.hpp).
  void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
            std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc,
            bool single_thread = false) const;
  // The same, or with perturbed = true the perturbed GEMM (debug.perturb).
  void gemm(bool perturbed, Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K,
            const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
            std::int64_t ldc, bool single_thread = false) const;
  // The same with K = tokens (whole sequences): a weight gradient, on tokens().
  void gemm_tokens(bool perturbed, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                   std::int64_t K, const float* A, std::int64_t lda, const float* B,
                   std::int64_t ldb, float* C, std::int64_t ldc) const;
  // Sum over TP ranks in place (tree in invariant mode, vendor otherwise); no-op at TP=1.
  void allreduce_sum(std::span<float> buf) const;
  // Exact elementwise max over TP ranks in place (max is order-free; MPI_MAX), then every
  // zero is canonicalized to +0.0 so the sign of a zero maximum cannot depend on the order.
  void allreduce_max(std::span<float> buf) const;

 private:
  // C = op(A) op(B) on context k (perturbed: the canonical GEMM with the perturbed block).
  void run_gemm(KernelCtx k, bool perturbed, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                std::int64_t K, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                float* C, std::int64_t ldc) const;

  const Grid* grid_;
  Determinism mode_;
  KernelCtx ctx_;
  KernelCtx tokens_;
  GemmImpl impl_;
  int size_ = 1, rank_ = 0;
};

// ---- Megatron's conjugate mappings ----------------------------------------------------
// copy-to-TP: forward identity; backward: the gradient of the replicated input is the sum
// over TP ranks of their partial input gradients.
inline void copy_to_tp_backward(const TpContext& tp, std::span<float> grad) {
  tp.allreduce_sum(grad);
}
// reduce-from-TP: forward sums the partial outputs over TP; backward identity.
inline void reduce_from_tp_forward(const TpContext& tp, std::span<float> x) {
  tp.allreduce_sum(x);
}

// ---- column-parallel linear: Y_l[T, out_l] = X[T, in] . W_l[out_l, in]^T (+ b_l) -----------
// The wide side (Y_l here, dY_l in the backward) may have rows ld_wide >= out_l floats apart
// (0: out_l), e.g. runtime/gemm.hpp's gemm_row_stride, so that the next GEMM reads it in place;
// entries past out_l in a row are neither read nor written. Every other matrix is packed.
void column_linear_forward(const TpContext& tp, const float* X, std::int64_t T, std::int64_t in,
                           const float* W_l, std::int64_t out_l, const float* b_l, float* Y_l,
                           bool perturb = false, std::int64_t ld_wide = 0);
// dW_l = dY_l^T X (overwritten); db_l = csum_rows(dY_l) if db_l; dX_partial = dY_l . W_l
// (overwritten, this rank's partial: the caller completes it with copy_to_tp_backward, which
// lets several column-parallel layers that read the same X share one allreduce).
void column_linear_backward(const TpContext& tp, const float* X, const float* dY_l, std::int64_t T,
                            std::int64_t in, const float* W_l, std::int64_t out_l, float* dW_l,
                            float* db_l, float* dX_partial, bool perturb_wgrad = false,
                            bool perturb_dgrad = false, std::int64_t ld_wide = 0);

// ---- row-parallel linear: Y[T, out] = reduce_TP(X_l[T, in_l] . W_l[out, in_l]^T) (+ b) ------
// ld_wide: the row stride of the wide side X_l (and dX_l in the backward), as above.
void row_linear_forward(const TpContext& tp, const float* X_l, std::int64_t T, std::int64_t in_l,
                        const float* W_l, std::int64_t out, const float* b, float* Y,
                        bool perturb = false, std::int64_t ld_wide = 0);
// dW_l = dY^T X_l; db = csum_rows(dY) if db; dX_l = dY . W_l (all overwritten; dY is replicated,
// so the backward needs no communication).
void row_linear_backward(const TpContext& tp, const float* X_l, const float* dY, std::int64_t T,
                         std::int64_t in_l, const float* W_l, std::int64_t out, float* dW_l,
                         float* db, float* dX_l, bool perturb_wgrad = false,
                         bool perturb_dgrad = false, std::int64_t ld_wide = 0);

// Y[t, j] = Y[t, j] + b[j] for T rows of width n (leading dimension ld).
void add_bias_rows(const KernelCtx& ctx, float* Y, std::int64_t T, std::int64_t n, std::int64_t ld,
                   const float* b);

}  // namespace lockstep
