// The avx512 instantiation of model/kernels/attn_rows_impl.hpp (compiled with the avx512 flags).
#include "model/kernels/attn_rows_impl.hpp"

namespace lockstep::attn_detail {

void softmax_causal_rows_avx512(const KernelCtx& ctx, float* S, std::int64_t C, std::int64_t r0,
                                std::int64_t r1, float scale) {
  softmax_rows_impl(ctx, S, C, r0, r1, scale);
}
void softmax_backward_rows_avx512(const KernelCtx& ctx, const float* P, float* G, std::int64_t C,
                                  std::int64_t r0, std::int64_t r1, float scale) {
  softmax_backward_rows_impl(ctx, P, G, C, r0, r1, scale);
}

bool rows_all_finite_avx512(const float* X, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  return rows_all_finite_impl(X, rows, n, ld);
}
std::int64_t first_row_with_zero_avx512(const float* Y, std::int64_t r0, std::int64_t r1,
                                        std::int64_t n, std::int64_t ld) {
  return first_row_with_zero_impl(Y, r0, r1, n, ld);
}

}  // namespace lockstep::attn_detail
