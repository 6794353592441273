// The baseline path of the LayerNorm rows (model/kernels/ln_rows_impl.hpp over simd::Sse2,
// baseline x86-64) and the run-time ISA dispatch of model/kernels/ln_rows.hpp. Every path
// returns the same bits (tests/unit/test_model_fused; docs/design.md section 2).
#include "model/kernels/ln_rows.hpp"

#include "model/kernels/ln_rows_impl.hpp"

namespace lockstep::ln_detail {

LOCKSTEP_LN_ROWS_DEFINE(scalar, simd::Sse2)

void forward_rows(const KernelCtx& ctx, float* xw, const float* x, const float* res,
                  std::int64_t r0, std::int64_t r1, std::int64_t n, const float* w, const float* b,
                  float eps, float* xhat, float* rstd, float* y) {
  const int B = ctx.reduce_block;
  switch (ctx.isa) {
    case Isa::avx512:
      return forward_rows_avx512(xw, x, res, r0, r1, n, w, b, eps, B, xhat, rstd, y);
    case Isa::avx2:
      return forward_rows_avx2(xw, x, res, r0, r1, n, w, b, eps, B, xhat, rstd, y);
    case Isa::scalar:
      break;
  }
  forward_rows_scalar(xw, x, res, r0, r1, n, w, b, eps, B, xhat, rstd, y);
}

void backward_rows(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                   const float* w, std::int64_t r0, std::int64_t r1, std::int64_t n, float* dx_out,
                   bool accumulate) {
  const int B = ctx.reduce_block;
  switch (ctx.isa) {
    case Isa::avx512:
      return backward_rows_avx512(dy, xhat, rstd, w, r0, r1, n, dx_out, accumulate, B);
    case Isa::avx2:
      return backward_rows_avx2(dy, xhat, rstd, w, r0, r1, n, dx_out, accumulate, B);
    case Isa::scalar:
      break;
  }
  backward_rows_scalar(dy, xhat, rstd, w, r0, r1, n, dx_out, accumulate, B);
}

void param_grad_cols(const KernelCtx& ctx, const float* dy, const float* xhat, std::int64_t T,
                     std::int64_t n, std::int64_t j0, std::int64_t w, float* dw, float* db) {
  const int B = ctx.reduce_block;
  switch (ctx.isa) {
    case Isa::avx512:
      return param_grad_cols_avx512(dy, xhat, T, n, j0, w, B, dw, db);
    case Isa::avx2:
      return param_grad_cols_avx2(dy, xhat, T, n, j0, w, B, dw, db);
    case Isa::scalar:
      break;
  }
  param_grad_cols_scalar(dy, xhat, T, n, j0, w, B, dw, db);
}

void backward_blocks(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                     const float* w, std::int64_t T, std::int64_t n, std::int64_t u0,
                     std::int64_t u1, float* dx_out, bool accumulate, float* leaves) {
  const int B = ctx.reduce_block;
  switch (ctx.isa) {
    case Isa::avx512:
      return backward_blocks_avx512(dy, xhat, rstd, w, T, n, u0, u1, dx_out, accumulate, B, leaves);
    case Isa::avx2:
      return backward_blocks_avx2(dy, xhat, rstd, w, T, n, u0, u1, dx_out, accumulate, B, leaves);
    case Isa::scalar:
      break;
  }
  backward_blocks_scalar(dy, xhat, rstd, w, T, n, u0, u1, dx_out, accumulate, B, leaves);
}

void fold_leaves(const KernelCtx& ctx, const float* leaves, std::int64_t U, std::int64_t n,
                 std::int64_t j0, std::int64_t w, float* dw, float* db) {
  switch (ctx.isa) {
    case Isa::avx512:
      return fold_leaves_avx512(leaves, U, n, j0, w, dw, db);
    case Isa::avx2:
      return fold_leaves_avx2(leaves, U, n, j0, w, dw, db);
    case Isa::scalar:
      break;
  }
  fold_leaves_scalar(leaves, U, n, j0, w, dw, db);
}

}  // namespace lockstep::ln_detail
