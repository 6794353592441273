// The avx2 instantiation of model/attn_rows_impl.hpp (compiled with the avx2 flags).
#include "model/attn_rows_impl.hpp"

namespace lockstep::attn_detail {

void softmax_causal_rows_avx2(const KernelCtx& ctx, float* S, std::int64_t C, std::int64_t r0,
                              std::int64_t r1, float scale) {
  softmax_rows_impl(ctx, S, C, r0, r1, scale);
}
void softmax_backward_rows_avx2(const KernelCtx& ctx, const float* P, float* G, std::int64_t C,
                                std::int64_t r0, std::int64_t r1, float scale) {
  softmax_backward_rows_impl(ctx, P, G, C, r0, r1, scale);
}

}  // namespace lockstep::attn_detail
