// The causal attention GEMMs of the GPT model (private to model/gpt*.cpp): CausalGemms, the
// six attention products of one (sequence, head) on causal blocks only, and AttnScratch, the
// per-thread attention workspace.
//
// Determinism contract (docs/design.md section 2): the attention GEMMs of one (sequence, head)
// run on causal blocks only, with the bits of the full-size GEMMs of the definition (gpt.hpp):
//  * S = Q K^T and dP = dO V^T reduce over head_dim, so computing only the columns [0, r1) of
//    the query rows [r0, r1) changes nothing (a GEMM's bits do not depend on N).
//  * O = P V and dQ = dS K reduce over keys, and the masked terms (j > i) are (+0.0) * x. Query
//    rows [r0, r1) (r1 a multiple of B or C) take the key prefix [0, r1): whole key blocks past
//    r1 are omitted. dV = P^T dO and dK = dS^T Q reduce over queries; key rows [j0, j1) omit the
//    leading whole query blocks [0, j0). Either way the kept blocks are evaluated as the
//    canonical tree over all blocks with the omitted leaves removed (the nodes it consists of
//    are GEMMs, combined left + right). Under pow2 the pruned tree of a prefix is the tree of
//    the prefix (one GEMM over [0, r1)); so it is under halving when C / B is a power of two
//    (the two full trees are one: one pow2 GEMM over [0, r1)); otherwise the prefix takes the
//    same pruned-tree evaluation as the suffix.
//  Proof of equality: with x finite, an omitted leaf (or chain tail) is +-0.0, and adding a
//  zero is exact unless the other side is also zero; removing the zero leaves of the tree
//  leaves the tree of the remaining leaves. So the result with omissions equals the full
//  result bit for bit except possibly in the sign of a zero result (when x is finite). Hence:
//  if x (the operand multiplied by the masked +0.0) has a non-finite value the full GEMM runs;
//  every output row containing a zero is recomputed by the full-K GEMM of that row (rows are
//  independent of M). deterministic mode (one chain over K) uses the same prefix / suffix GEMMs
//  and fix-ups (a chain's omitted terms are +-0.0 too). fast mode skips checks and fix-ups.
// The fused AVX-512 paths (model/kernels/attn_gemm.hpp) keep the same contract. A call is
// single-threaded; callers split (sequence, head) pairs over threads.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "model/kernels/attn_gemm.hpp"
#include "parallel/tp_layers.hpp"

namespace lockstep::gpt_detail {

class CausalGemms {
 public:
  // perturbed (debug.perturb): the canonical GEMM with block tp.perturbed_block().
  // fused: use model/kernels/attn_gemm.hpp's kernels where they apply (never when perturbed; the op
  // trace passes false because it records the scores' masked entries, which those kernels
  // leave unwritten). `scratch` arguments: attn_gemm_scratch_floats(C, hd, B) floats per
  // thread, used only by the fused kernels.
  CausalGemms(const TpContext& tp, std::int64_t C, int B, bool perturbed = false, bool fused = true)
      : tp_(tp),
        pow2_(tp.with_tree(TreeShape::pow2)),
        C_(C),
        B_(perturbed ? tp.perturbed_block() : B),
        exact_(tp.mode() != Determinism::fast),
        perturbed_(perturbed),
        tree_(perturbed || tp.mode() == Determinism::invariant),
        fused_(fused && !perturbed) {
    rows_ = B_;
    while (rows_ < 64) rows_ += B_;
    if (rows_ >= C_) rows_ = C_;
  }
  // Query-row block size (a multiple of B, or C).
  std::int64_t rows() const { return rows_; }

  // S[r0:r1, 0:r1) = Q[r0:r1] K^T per row block (ld of S is C); the fused kernel writes S[i, j]
  // for j <= i (and some masked entries).
  void nt(std::int64_t hd, const float* Q, std::int64_t ldq, const float* K, std::int64_t ldk,
          float* S, float* scratch) const;
  // Y[C, n] = A X, A [C, C] (lda) with A[i, j] = +0.0 for j > i, X [C, n] (ldx).
  void prefix(std::int64_t n, const float* A, std::int64_t lda, const float* X, std::int64_t ldx,
              float* Y, std::int64_t ldy, float* scratch) const;
  // Y[C, n] = A^T X, A [C, C] (lda) with A[i, j] = +0.0 for i < j, X [C, n] (ldx).
  // scratch: at least 8 * rows() * n floats, and the fused kernels' size.
  void suffix(std::int64_t n, const float* A, std::int64_t lda, const float* X, std::int64_t ldx,
              float* Y, std::int64_t ldy, float* scratch) const;

 private:
  // One pruned-tree product: rows x n outputs, kept leaves [ka, kb) of the C / B blocks of K;
  // trans: Y = A^T X (the suffix; A offset to its first column), else Y = A X (the prefix; A
  // offset to its first row).
  struct Sub {
    const float* A;
    std::int64_t lda;
    const float* X;
    std::int64_t ldx, rows, n, ka, kb;
    bool trans;
    float* scratch;
  };
  // T(lo, hi) over the K blocks with the leaves outside [s.ka, s.kb) removed; false if none is
  // left.
  bool tree(const Sub& s, std::int64_t lo, std::int64_t hi, float* out, std::int64_t ldo,
            int depth) const;
  bool use_fused(std::int64_t n) const;
  // Recomputes (row(i)) each row i in [r0, r1) of Y [*, n] (ldy) that holds a +-0.0: there a
  // skipped masked term (+0.0 x) could have changed the sign of the zero.
  template <class Row>
  void redo_zero_rows(const float* Y, std::int64_t r0, std::int64_t r1, std::int64_t n,
                      std::int64_t ldy, Row row) const;

  const TpContext& tp_;
  TpContext pow2_;  // tp_ under the pow2 tree: the prefix products when C / B is 2^k
  std::int64_t C_;
  std::int64_t B_;
  bool exact_;
  bool perturbed_;
  bool tree_;
  bool fused_;
  std::int64_t rows_ = 0;
};
// Attention scratch of one thread: P [C, C] (scores and probabilities when they are not
// stored), dP [C, C] (backward), then the suffix tree's partial results or the fused kernels'
// scratch (CausalGemms).
struct AttnScratch {
  std::int64_t C, per_thread;
  AttnScratch(std::int64_t C_, std::int64_t hd, int B, std::int64_t rows) : C(C_) {
    const std::int64_t nblk = (C + B - 1) / B;
    const std::int64_t tree = (std::bit_width(static_cast<std::uint64_t>(nblk)) + 1) * rows * hd;
    per_thread = 2 * C * C + std::max(tree, attn_gemm_scratch_floats(C, hd, B));
  }
  float* p(float* base, int thread) const { return base + thread * per_thread; }
  float* dp(float* base, int thread) const { return p(base, thread) + C * C; }
  float* tmp(float* base, int thread) const { return p(base, thread) + 2 * C * C; }
};

}  // namespace lockstep::gpt_detail
