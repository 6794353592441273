// CausalGemms (model/gpt_causal_gemms.hpp): the causal attention GEMMs, their zero-row and
// non-finite fix-ups and the suffix products' pruned canonical tree.
// Determinism contract (docs/design.md section 2): the bits of the full-size GEMMs of the
// definition (gpt.hpp) in the exact modes; the proof is in the header.
#include "model/gpt_causal_gemms.hpp"

#include "model/kernels/attn_rows.hpp"

namespace lockstep::gpt_detail {

// The fused kernels evaluate the pow2 tree pruned to the kept leaves; under halving that is
// the contract only when the block count is a power of two (then both full trees are one).
bool CausalGemms::use_fused(std::int64_t n) const {
  const std::int64_t nb = (C_ + B_ - 1) / B_;
  const bool same_tree = tp_.kernel().tree == TreeShape::pow2 || std::has_single_bit(
                                                                     static_cast<std::uint64_t>(nb));
  return fused_ && attn_gemm_supported(tp_.kernel(), C_, n, tree_) &&
         B_ == tp_.kernel().reduce_block && (same_tree || !tree_);
}

template <class Row>
void CausalGemms::redo_zero_rows(const float* Y, std::int64_t r0, std::int64_t r1, std::int64_t n,
                                 std::int64_t ldy, Row row) const {
  for (std::int64_t i = first_row_with_zero(tp_.kernel(), Y, r0, r1, n, ldy); i < r1;
       i = first_row_with_zero(tp_.kernel(), Y, i + 1, r1, n, ldy))
    row(i);
}

void CausalGemms::nt(std::int64_t hd, const float* Q, std::int64_t ldq, const float* K,
                     std::int64_t ldk, float* S, float* scratch) const {
  if (use_fused(hd)) return causal_scores(C_, hd, Q, ldq, K, ldk, S, scratch);
  for (std::int64_t r0 = 0; r0 < C_; r0 += rows_) {
    const std::int64_t r1 = std::min(C_, r0 + rows_);
    tp_.gemm(perturbed_, Trans::N, Trans::T, r1 - r0, r1, hd, Q + r0 * ldq, ldq, K, ldk,
             S + r0 * C_, C_, true);
  }
}

void CausalGemms::prefix(std::int64_t n, const float* A, std::int64_t lda, const float* X,
                         std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch) const {
  auto full = [&] {
    tp_.gemm(perturbed_, Trans::N, Trans::N, C_, n, C_, A, lda, X, ldx, Y, ldy, true);
  };
  // Row i in full (every term, masked ones included): the zero-row fix-up.
  auto full_row = [&](std::int64_t i) {
    tp_.gemm(perturbed_, Trans::N, Trans::N, 1, n, C_, A + i * lda, lda, X, ldx, Y + i * ldy, ldy,
             true);
  };
  if (lda == C_ && use_fused(n)) {  // the kernel tests X and Y on the way (AttnChecks)
    AttnChecks chk;
    causal_prefix(C_, n, static_cast<int>(B_), tree_, A, X, ldx, Y, ldy, scratch,
                  exact_ ? &chk : nullptr);
    if (!chk.x_finite) return full();
    if (chk.y_zero) redo_zero_rows(Y, 0, C_, n, ldy, full_row);
    return;
  }
  if (exact_ && !rows_all_finite(tp_.kernel(), X, C_, n, ldx)) return full();
  const std::int64_t nb = (C_ + B_ - 1) / B_;
  const bool pow2_blocks = std::has_single_bit(static_cast<std::uint64_t>(nb));
  const bool pruned = tree_ && tp_.kernel().tree != TreeShape::pow2 && !pow2_blocks;
  // Under halving with 2^k blocks the pruned tree of a prefix is its pow2 tree.
  const TpContext& prefix_tp = tree_ && pow2_blocks ? pow2_ : tp_;
  for (std::int64_t r0 = 0; r0 < C_; r0 += rows_) {
    const std::int64_t r1 = std::min(C_, r0 + rows_);
    if (pruned) {
      Sub s{A + r0 * lda, lda, X, ldx, r1 - r0, n, 0, (r1 + B_ - 1) / B_, false, scratch};
      tree(s, 0, (C_ + B_ - 1) / B_, Y + r0 * ldy, ldy, 0);
    } else {
      prefix_tp.gemm(perturbed_, Trans::N, Trans::N, r1 - r0, n, r1, A + r0 * lda, lda, X,
                     ldx, Y + r0 * ldy, ldy, true);
    }
    if (!exact_ || r1 == C_) continue;
    redo_zero_rows(Y, r0, r1, n, ldy, full_row);
  }
}

void CausalGemms::suffix(std::int64_t n, const float* A, std::int64_t lda, const float* X,
                         std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch) const {
  auto full = [&] {
    tp_.gemm(perturbed_, Trans::T, Trans::N, C_, n, C_, A, lda, X, ldx, Y, ldy, true);
  };
  // Row j in full (every term, masked ones included): the zero-row fix-up.
  auto full_row = [&](std::int64_t j) {
    tp_.gemm(perturbed_, Trans::T, Trans::N, 1, n, C_, A + j, lda, X, ldx, Y + j * ldy, ldy, true);
  };
  if (lda == C_ && use_fused(n)) {  // the kernel tests X and Y on the way (AttnChecks)
    AttnChecks chk;
    causal_suffix(C_, n, static_cast<int>(B_), tree_, A, X, ldx, Y, ldy, scratch,
                  exact_ ? &chk : nullptr);
    if (!chk.x_finite) return full();
    if (chk.y_zero) redo_zero_rows(Y, 0, C_, n, ldy, full_row);
    return;
  }
  if (exact_ && !rows_all_finite(tp_.kernel(), X, C_, n, ldx)) return full();
  for (std::int64_t j0 = 0; j0 < C_; j0 += rows_) {
    const std::int64_t j1 = std::min(C_, j0 + rows_), m = j0 / B_;
    float* y = Y + j0 * ldy;
    if (m == 0) {
      tp_.gemm(perturbed_, Trans::T, Trans::N, j1 - j0, n, C_, A + j0, lda, X, ldx, y, ldy, true);
      continue;
    }
    if (tree_) {
      const std::int64_t nb = (C_ + B_ - 1) / B_;
      Sub s{A + j0, lda, X, ldx, j1 - j0, n, m, nb, true, scratch};
      tree(s, 0, nb, y, ldy, 0);
    } else {
      const std::int64_t k0 = m * B_;
      tp_.gemm(perturbed_, Trans::T, Trans::N, j1 - j0, n, C_ - k0, A + k0 * lda + j0, lda,
               X + k0 * ldx, ldx, y, ldy, true);
    }
    if (!exact_) continue;
    redo_zero_rows(Y, j0, j1, n, ldy, full_row);
  }
}

bool CausalGemms::tree(const Sub& s, std::int64_t lo, std::int64_t hi, float* out, std::int64_t ldo,
                       int depth) const {
  if (hi <= s.ka || lo >= s.kb) return false;
  if (lo >= s.ka && hi <= s.kb) {  // a kept node: one GEMM over its K range is its subtree
    const std::int64_t k0 = lo * B_, k1 = std::min(C_, hi * B_);
    if (s.trans)
      tp_.gemm(perturbed_, Trans::T, Trans::N, s.rows, s.n, k1 - k0, s.A + k0 * s.lda, s.lda,
               s.X + k0 * s.ldx, s.ldx, out, ldo, true);
    else
      tp_.gemm(perturbed_, Trans::N, Trans::N, s.rows, s.n, k1 - k0, s.A + k0, s.lda,
               s.X + k0 * s.ldx, s.ldx, out, ldo, true);
    return true;
  }
  const std::int64_t mid = lo + tree_split(tp_.kernel().tree, hi - lo);
  if (!tree(s, lo, mid, out, ldo, depth + 1)) return tree(s, mid, hi, out, ldo, depth + 1);
  float* tmp = s.scratch + static_cast<std::int64_t>(depth) * s.rows * s.n;
  if (!tree(s, mid, hi, tmp, s.n, depth + 1)) return true;
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t c = 0; c < s.n; ++c) out[r * ldo + c] = out[r * ldo + c] + tmp[r * s.n + c];
  return true;
}

}  // namespace lockstep::gpt_detail
