#include "model/attn_rows.hpp"

#include "model/attn_rows_impl.hpp"

namespace lockstep {

void softmax_causal_rows(const KernelCtx& ctx, float* S, std::int64_t C, std::int64_t r0,
                         std::int64_t r1, float scale) {
  KernelCtx one = ctx;
  one.threads = 1;
  switch (ctx.isa) {
    case Isa::avx512:
      return attn_detail::softmax_causal_rows_avx512(one, S, C, r0, r1, scale);
    case Isa::avx2:
      return attn_detail::softmax_causal_rows_avx2(one, S, C, r0, r1, scale);
    case Isa::scalar:
      break;
  }
  attn_detail::softmax_rows_impl(one, S, C, r0, r1, scale);
}

void softmax_backward_rows(const KernelCtx& ctx, const float* P, float* G, std::int64_t C,
                           std::int64_t r0, std::int64_t r1, float scale) {
  KernelCtx one = ctx;
  one.threads = 1;
  switch (ctx.isa) {
    case Isa::avx512:
      return attn_detail::softmax_backward_rows_avx512(one, P, G, C, r0, r1, scale);
    case Isa::avx2:
      return attn_detail::softmax_backward_rows_avx2(one, P, G, C, r0, r1, scale);
    case Isa::scalar:
      break;
  }
  attn_detail::softmax_backward_rows_impl(one, P, G, C, r0, r1, scale);
}

}  // namespace lockstep
