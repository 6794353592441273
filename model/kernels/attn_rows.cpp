// The baseline path of the softmax rows (model/kernels/attn_rows_impl.hpp over simd::Scalar,
// baseline x86-64) and the run-time ISA dispatch of model/kernels/attn_rows.hpp. Every path
// returns the same bits (tests/unit/test_attn_rows; docs/design.md section 2).
#include "model/kernels/attn_rows.hpp"

#include "model/kernels/attn_rows_impl.hpp"

namespace lockstep {

namespace attn_detail {
LOCKSTEP_ATTN_ROWS_DEFINE(scalar, simd::Scalar)
}  // namespace attn_detail

namespace {
// The schedules of the row trees of a C-column causal block (rows of 1 .. C / B leaves), built
// here (no ISA flags) and passed to the kernels as one flat array (mt.row(1)).
MergeTable row_trees(const KernelCtx& ctx, std::int64_t C) {
  return MergeTable(ctx.tree, (C + ctx.reduce_block - 1) / ctx.reduce_block);
}
}  // namespace

void softmax_causal_rows(const KernelCtx& ctx, float* S, std::int64_t C, std::int64_t r0,
                         std::int64_t r1, float scale) {
  KernelCtx one = ctx;
  one.threads = 1;
  const MergeTable mt = row_trees(ctx, C);
  const std::uint8_t* table = mt.row(1);
  switch (ctx.isa) {
    case Isa::avx512:
      return attn_detail::softmax_causal_rows_avx512(one, S, C, r0, r1, scale, table);
    case Isa::avx2:
      return attn_detail::softmax_causal_rows_avx2(one, S, C, r0, r1, scale, table);
    case Isa::scalar:
      break;
  }
  attn_detail::softmax_causal_rows_scalar(one, S, C, r0, r1, scale, table);
}

void softmax_backward_rows(const KernelCtx& ctx, const float* P, float* G, std::int64_t C,
                           std::int64_t r0, std::int64_t r1, float scale) {
  KernelCtx one = ctx;
  one.threads = 1;
  const MergeTable mt = row_trees(ctx, C);
  const std::uint8_t* table = mt.row(1);
  switch (ctx.isa) {
    case Isa::avx512:
      return attn_detail::softmax_backward_rows_avx512(one, P, G, C, r0, r1, scale, table);
    case Isa::avx2:
      return attn_detail::softmax_backward_rows_avx2(one, P, G, C, r0, r1, scale, table);
    case Isa::scalar:
      break;
  }
  attn_detail::softmax_backward_rows_scalar(one, P, G, C, r0, r1, scale, table);
}

bool rows_all_finite(const KernelCtx& ctx, const float* X, std::int64_t rows, std::int64_t n,
                     std::int64_t ld) {
  if (ctx.isa == Isa::avx512) return attn_detail::rows_all_finite_avx512(X, rows, n, ld);
  if (ctx.isa == Isa::avx2) return attn_detail::rows_all_finite_avx2(X, rows, n, ld);
  return attn_detail::rows_all_finite_scalar(X, rows, n, ld);
}

std::int64_t first_row_with_zero(const KernelCtx& ctx, const float* Y, std::int64_t r0,
                                 std::int64_t r1, std::int64_t n, std::int64_t ld) {
  if (ctx.isa == Isa::avx512) return attn_detail::first_row_with_zero_avx512(Y, r0, r1, n, ld);
  if (ctx.isa == Isa::avx2) return attn_detail::first_row_with_zero_avx2(Y, r0, r1, n, ld);
  return attn_detail::first_row_with_zero_scalar(Y, r0, r1, n, ld);
}

}  // namespace lockstep
