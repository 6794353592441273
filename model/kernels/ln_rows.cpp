// The baseline path of the LayerNorm rows (model/kernels/ln_rows_impl.hpp over simd::Sse2,
// baseline x86-64) and the run-time ISA dispatch of model/kernels/ln_rows.hpp. Every path
// returns the same bits (tests/unit/test_model_fused; docs/design.md section 2).
#include "model/kernels/ln_rows.hpp"

#include "model/kernels/ln_rows_impl.hpp"

namespace lockstep::ln_detail {

LOCKSTEP_LN_ROWS_DEFINE(scalar, simd::Sse2)

// The path of ctx.isa: NAME_avx512, NAME_avx2 or NAME_scalar with the same arguments.
#define LN_DISPATCH(NAME, ...)                  \
  switch (ctx.isa) {                            \
    case Isa::avx512:                           \
      return NAME##_avx512(__VA_ARGS__);        \
    case Isa::avx2:                             \
      return NAME##_avx2(__VA_ARGS__);          \
    case Isa::scalar:                           \
      break;                                    \
  }                                             \
  NAME##_scalar(__VA_ARGS__)

void forward_rows(const KernelCtx& ctx, const LnTrees& tr, float* xw, const float* x,
                  const float* res, std::int64_t r0, std::int64_t r1, std::int64_t n,
                  const float* w, const float* b, float eps, float* xhat, float* rstd, float* y) {
  LN_DISPATCH(forward_rows, xw, x, res, r0, r1, n, w, b, eps, tr, xhat, rstd, y);
}

void backward_rows(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                   const float* rstd, const float* w, std::int64_t r0, std::int64_t r1,
                   std::int64_t n, float* dx_out, bool accumulate) {
  LN_DISPATCH(backward_rows, dy, xhat, rstd, w, r0, r1, n, dx_out, accumulate, tr);
}

void param_grad_cols(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                     std::int64_t n, std::int64_t j0, std::int64_t w, float* dw, float* db) {
  LN_DISPATCH(param_grad_cols, dy, xhat, n, j0, w, tr, dw, db);
}

void backward_blocks(const KernelCtx& ctx, const LnTrees& tr, const float* dy, const float* xhat,
                     const float* rstd, const float* w, std::int64_t n, std::int64_t u0,
                     std::int64_t u1, float* dx_out, bool accumulate, float* leaves) {
  LN_DISPATCH(backward_blocks, dy, xhat, rstd, w, n, u0, u1, dx_out, accumulate, tr, leaves);
}

void fold_leaves(const KernelCtx& ctx, const LnTrees& tr, const float* leaves, std::int64_t n,
                 std::int64_t j0, std::int64_t w, float* dw, float* db) {
  LN_DISPATCH(fold_leaves, leaves, n, j0, w, tr, dw, db);
}

#undef LN_DISPATCH

}  // namespace lockstep::ln_detail
