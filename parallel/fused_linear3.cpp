#include "parallel/fused_linear3.hpp"

#include <algorithm>
#include <bit>
#include <span>

#include "runtime/csum.hpp"

namespace lockstep {

namespace {
// wcat [3 out_l, in] = [W0; W1; W2]; returns the concatenated bias (after wcat) or nullptr.
const float* concat(const Linear3& lin, std::int64_t out_l, std::int64_t in, float* wcat) {
  const std::int64_t nw = out_l * in;
  for (int i = 0; i < 3; ++i) std::copy_n(lin.w[i], nw, wcat + i * nw);
  if (!lin.b[0]) return nullptr;
  float* bcat = wcat + 3 * nw;
  for (int i = 0; i < 3; ++i) std::copy_n(lin.b[i], out_l, bcat + i * out_l);
  return bcat;
}
}  // namespace

std::int64_t linear3_scratch_floats(const TpContext& tp, std::int64_t T, std::int64_t in,
                                    std::int64_t out_l) {
  return 3 * out_l * (in + 1) + (linear3_single_dgrad(tp, out_l) ? 0 : 3 * T * in);
}

bool linear3_single_dgrad(const TpContext& tp, std::int64_t out_l) {
  if (tp.size() != 1) return false;
  if (tp.mode() == Determinism::fast) return true;
  const std::int64_t B = tp.kernel().reduce_block;
  if (tp.mode() != Determinism::invariant || out_l % B != 0) return false;
  const auto blocks = static_cast<std::uint64_t>(out_l / B);
  // T over 3 * 2^j blocks is (T0 + T1) + T2 under pow2 for every j, under halving for j = 0.
  return tp.kernel().tree == TreeShape::pow2 ? std::has_single_bit(blocks) : blocks == 1;
}

void linear3_forward(const TpContext& tp, const float* X, std::int64_t T, std::int64_t in,
                     const Linear3& lin, std::int64_t out_l, float* Y, float* scratch) {
  const float* bcat = concat(lin, out_l, in, scratch);
  const std::int64_t n = 3 * out_l;
  tp.gemm(Trans::N, Trans::T, T, n, in, X, in, scratch, in, Y, n);
  if (bcat) add_bias_rows(tp.kernel(), Y, T, n, n, bcat);
}

void linear3_backward(const TpContext& tp, const float* X, const float* dY, std::int64_t T,
                      std::int64_t in, const Linear3& lin, std::int64_t out_l,
                      const Linear3Grads& grads, float* dX, float* scratch) {
  const std::int64_t n = 3 * out_l, nw = out_l * in;
  float* wcat = scratch;  // weights, then their gradients
  // Weight gradients: one TN GEMM of M = 3 out_l, split into the three tensors.
  tp.gemm_tokens(false, Trans::T, Trans::N, n, in, T, dY, n, X, in, wcat, in);
  for (int i = 0; i < 3; ++i) std::copy_n(wcat + i * nw, nw, grads.w[i]);
  if (grads.b[0]) {
    float* bg = wcat + 3 * nw;
    csum_rows(tp.tokens(), dY, T, n, n, bg);
    for (int i = 0; i < 3; ++i) std::copy_n(bg + i * out_l, out_l, grads.b[i]);
  }
  concat(lin, out_l, in, wcat);
  if (linear3_single_dgrad(tp, out_l)) {
    tp.gemm(Trans::N, Trans::N, T, in, n, dY, n, wcat, in, dX, in);
    return;
  }
  float* parts = scratch + 3 * out_l * (in + 1);  // p0, p1, p2 [T, in] each
  for (int i = 0; i < 3; ++i)
    tp.gemm(Trans::N, Trans::N, T, in, out_l, dY + i * out_l, n, wcat + i * nw, in,
            parts + i * T * in, in);
  copy_to_tp_backward(tp, std::span<float>(parts, static_cast<std::size_t>(3 * T * in)));
  const float* p0 = parts;
  const float* p1 = parts + T * in;
  const float* p2 = parts + 2 * T * in;
  const std::int64_t total = T * in;
#pragma omp parallel for num_threads(tp.kernel().threads) schedule(static)
  for (std::int64_t e = 0; e < total; ++e) dX[e] = (p0[e] + p1[e]) + p2[e];
}

}  // namespace lockstep
