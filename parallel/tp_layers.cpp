#include "parallel/tp_layers.hpp"

#include <mpi.h>

#include "runtime/collectives.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep {

TpContext::TpContext(const Grid* grid, Determinism mode, KernelCtx ctx, std::int64_t sequence)
    : grid_(grid), mode_(mode), ctx_(ctx.flat()), tokens_(ctx.over_sequences(sequence)) {
  validate(ctx_);
  impl_ = gemm_impl_for(mode, ctx_.isa);
  if (grid_) {
    size_ = grid_->tp_size();
    rank_ = grid_->tp_rank();
  }
}

void TpContext::run_gemm(KernelCtx k, bool perturbed, Trans ta, Trans tb, std::int64_t M,
                         std::int64_t N, std::int64_t K, const float* A, std::int64_t lda,
                         const float* B, std::int64_t ldb, float* C, std::int64_t ldc) const {
  if (!perturbed) return lockstep::gemm(k, impl_, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  k.reduce_block = perturbed_block();
  lockstep::gemm(k, GemmImpl::canonical, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

void TpContext::gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K,
                     const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
                     std::int64_t ldc, bool single_thread) const {
  run_gemm(single_thread ? kernel1() : ctx_, false, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

void TpContext::gemm(bool perturbed, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                     std::int64_t K, const float* A, std::int64_t lda, const float* B,
                     std::int64_t ldb, float* C, std::int64_t ldc, bool single_thread) const {
  run_gemm(single_thread ? kernel1() : ctx_, perturbed, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

void TpContext::gemm_tokens(bool perturbed, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                            std::int64_t K, const float* A, std::int64_t lda, const float* B,
                            std::int64_t ldb, float* C, std::int64_t ldc) const {
  run_gemm(tokens_, perturbed, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

void TpContext::allreduce_sum(std::span<float> buf) const {
  if (size_ == 1) return;
  lockstep::allreduce_sum(mode_, grid_->tp_comm(), buf);
}

void TpContext::allreduce_max(std::span<float> buf) const {
  if (size_ > 1) {
    const Communicator& c = grid_->tp_comm();
    watchdog::arrival_gate(c, "MPI_Allreduce(MPI_MAX)");  // float: keep the blocking algorithm
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT,
                            MPI_MAX, c.handle()),
              "MPI_Allreduce(MPI_MAX)", c.handle());
  }
  for (float& x : buf)
    if (x == 0.0f) x = 0.0f;
}

void add_bias_rows(const KernelCtx& ctx, float* Y, std::int64_t T, std::int64_t n, std::int64_t ld,
                   const float* b) {
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    float* y = Y + t * ld;
    for (std::int64_t j = 0; j < n; ++j) y[j] = y[j] + b[j];
  }
}

void column_linear_forward(const TpContext& tp, const float* X, std::int64_t T, std::int64_t in,
                           const float* W_l, std::int64_t out_l, const float* b_l, float* Y_l,
                           bool perturb, std::int64_t ld_wide) {
  const std::int64_t ldy = ld_wide > 0 ? ld_wide : out_l;
  tp.gemm(perturb, Trans::N, Trans::T, T, out_l, in, X, in, W_l, in, Y_l, ldy);
  if (b_l) add_bias_rows(tp.kernel(), Y_l, T, out_l, ldy, b_l);
}

void column_linear_backward(const TpContext& tp, const float* X, const float* dY_l, std::int64_t T,
                            std::int64_t in, const float* W_l, std::int64_t out_l, float* dW_l,
                            float* db_l, float* dX_partial, bool perturb_wgrad, bool perturb_dgrad,
                            std::int64_t ld_wide) {
  const std::int64_t ldd = ld_wide > 0 ? ld_wide : out_l;
  tp.gemm_tokens(perturb_wgrad, Trans::T, Trans::N, out_l, in, T, dY_l, ldd, X, in, dW_l, in);
  if (db_l) csum_rows(tp.tokens(), dY_l, T, out_l, ldd, db_l);
  if (dX_partial)
    tp.gemm(perturb_dgrad, Trans::N, Trans::N, T, in, out_l, dY_l, ldd, W_l, in, dX_partial, in);
}

void row_linear_forward(const TpContext& tp, const float* X_l, std::int64_t T, std::int64_t in_l,
                        const float* W_l, std::int64_t out, const float* b, float* Y, bool perturb,
                        std::int64_t ld_wide) {
  const std::int64_t ldx = ld_wide > 0 ? ld_wide : in_l;
  tp.gemm(perturb, Trans::N, Trans::T, T, out, in_l, X_l, ldx, W_l, in_l, Y, out);
  reduce_from_tp_forward(tp, std::span<float>(Y, static_cast<std::size_t>(T * out)));
  if (b) add_bias_rows(tp.kernel(), Y, T, out, out, b);
}

void row_linear_backward(const TpContext& tp, const float* X_l, const float* dY, std::int64_t T,
                         std::int64_t in_l, const float* W_l, std::int64_t out, float* dW_l,
                         float* db, float* dX_l, bool perturb_wgrad, bool perturb_dgrad,
                         std::int64_t ld_wide) {
  const std::int64_t ldx = ld_wide > 0 ? ld_wide : in_l;
  tp.gemm_tokens(perturb_wgrad, Trans::T, Trans::N, out, in_l, T, dY, out, X_l, ldx, dW_l, in_l);
  if (db) csum_rows(tp.tokens(), dY, T, out, out, db);
  if (dX_l) tp.gemm(perturb_dgrad, Trans::N, Trans::N, T, in_l, out, dY, out, W_l, in_l, dX_l, ldx);
}

}  // namespace lockstep
